"""What both multi-device runners do on the host, in NumPy: read and check a layout,
build its permutation, cut the rows into rank-major order, and read the ranks' answers.

The contract is model/include/attn_oracle/model/context_parallel.hpp
(docs/semantics.md#91-context-parallelism); the permutation here is built chunk by chunk as the model builds it, so a
runner's answer can be compared with the oracle's token-by-token one. No JAX or torch
here, and no compiled extension (the batch check uses it only when it imports).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..domain import CP_BALANCES, CP_STRATEGIES
from ..errors import AttnOracleError, Unsupported
from ..stacks._cp_common import head_tail_spans

HOST_DEVICES = 8  # the ranks XLA makes on a CPU when nobody said otherwise
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def ask_for_host_devices(count: int = HOST_DEVICES):
    """Set XLA_FLAGS's host device count when unset, so that JAX on a CPU has `count` devices;
    it counts only if JAX has not started its CPU backend yet. The note said, or None."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _DEVICE_FLAG in flags:
        return None
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={count}".strip()
    return (f"attn_oracle.multidevice: set XLA_FLAGS={_DEVICE_FLAG}={count} (host devices as ranks on a CPU; "
            "set the flag yourself for another count)")


INT32_MAX = 2**31 - 1  # the runners hold positions in int32, as the stacks do


def steps(layout) -> int:
    """Kernel calls a rank makes: cp ring steps, else 1."""
    return int(layout.cp) if layout.strategy == "ring" else 1


# ------------------------------------------------------------------ checks
def _error(code: str, message: str):
    return AttnOracleError(code, message)


def _check_batch(batch) -> None:
    """validate_attention's batch codes, through the reference when the extension imports
    (it always does under `check`); a bare checkout without it skips this step."""
    try:
        from .. import packing
    except ImportError:
        return
    packing.check(batch)


def validate(layout, problem) -> None:
    """Raise what validate_cp raises (context_parallel.hpp), in its order: the layout alone,
    the problem, extra dims, self-attention, heads, divisibility, head_tail spans, indices."""
    cp, strategy, balance = layout.cp, layout.strategy, layout.balance
    stripe, indices = getattr(layout, "stripe", 1), getattr(layout, "indices", None)
    if strategy not in CP_STRATEGIES or balance not in CP_BALANCES:
        raise _error("cp_bad_layout", f"strategy {strategy!r}, balance {balance!r}: not a layout")
    if cp < 1:
        raise _error("cp_bad_layout", f"cp = {cp}: a layout needs at least one rank")
    if balance == "striped" and stripe < 1:
        raise _error("cp_bad_layout", f"stripe = {stripe}: a stripe holds at least one token")
    if balance != "explicit_indices" and indices is not None and np.size(indices):
        raise _error("cp_bad_layout", f"indices given to the {balance} balance: only explicit_indices takes them")
    b = problem.batch
    _check_batch(b)
    if problem.heads_q < 1 or problem.heads_kv < 1 or problem.head_dim < 1 or problem.heads_q % problem.heads_kv:
        raise _error("bad_heads", f"heads_q = {problem.heads_q}, heads_kv = {problem.heads_kv}, "
                                  f"head_dim = {problem.head_dim}")
    q_ids, kv_ids = np.asarray(b.q_segment_ids), np.asarray(b.kv_segment_ids)
    if q_ids.ndim != 2 or kv_ids.ndim != 2:
        raise Unsupported("context parallelism splits [B, T] rows; these ids have extra leading dims")
    q_pos, kv_pos = (np.broadcast_to(np.asarray(p), i.shape) for p, i in
                     ((b.q_segment_pos, q_ids), (b.kv_segment_pos, kv_ids)))
    if q_ids.shape[1] != kv_ids.shape[1]:
        raise _error("cp_not_self_attention", f"q has {q_ids.shape[1]} tokens a row and kv {kv_ids.shape[1]}")
    differ = np.argwhere((q_ids != kv_ids) | (q_pos != kv_pos))
    if len(differ):
        r, t = differ[0]
        raise _error("cp_not_self_attention", f"row {r}, token {t}: q (id {q_ids[r, t]}, position {q_pos[r, t]}) and "
                                              f"kv (id {kv_ids[r, t]}, position {kv_pos[r, t]}) differ")
    if strategy == "all_to_all" and (problem.heads_q % cp or problem.heads_kv % cp):
        raise _error("cp_heads_not_divisible", f"heads_q = {problem.heads_q}, heads_kv = {problem.heads_kv}: "
                                               f"all_to_all needs both multiples of cp = {cp}")
    rows, t = q_ids.shape
    unit = {"dual_chunk_swap": 2 * cp, "striped": cp * stripe}.get(balance, cp)
    if t % unit:
        raise _error("cp_not_divisible", f"T = {t} is not a multiple of {unit} ({balance})")
    if balance == "head_tail":
        for r in range(rows):
            for start, end in head_tail_spans(q_ids[r]):
                if (end - start) % (2 * cp):
                    raise _error("cp_document_not_divisible",
                                 f"row {r}, span of tokens {start}..{end - 1}: length {end - start} is not a "
                                 f"multiple of 2*cp = {2 * cp} (head_tail)")
    if balance == "explicit_indices":
        idx = np.asarray(indices if indices is not None else np.zeros((0,), np.int64))
        if idx.shape != (rows, t):
            raise _error("cp_bad_permutation", f"indices of shape {list(idx.shape)} where the batch is [{rows}, {t}]")
        for r in range(rows):
            seen = {}
            for s, v in enumerate(idx[r]):
                if not 0 <= v < t:
                    raise _error("cp_bad_permutation", f"row {r}, slot {s}: index {v} is outside [0, {t})")
                if v in seen:
                    raise _error("cp_bad_permutation", f"row {r}, slot {s}: index {v} is listed already at slot {seen[v]}")
                seen[v] = s


def unsupported(layout, problem, ranks_available: int) -> Optional[str]:
    """Why a runner with this many ranks declines a problem, or None."""
    if layout.cp > ranks_available:
        return f"cp = {layout.cp}: this runner has {ranks_available} ranks"
    ids, pos = np.asarray(problem.batch.q_segment_ids), np.asarray(problem.batch.q_segment_pos)
    if ids.ndim == 2 and pos.size and np.broadcast_to(pos, ids.shape)[ids != 0].max(initial=0) > INT32_MAX:
        return "a position above 2**31 - 1: the ranks hold positions in int32, as the stacks do"
    return None


# ------------------------------------------------------------------ the permutation
def _head_tail(per_rank: list, start: int, n: int, cp: int) -> None:
    chunk = n // (2 * cp)
    for r in range(cp):
        for c in (r, 2 * cp - 1 - r):
            per_rank[r].extend(range(start + c * chunk, start + (c + 1) * chunk))


def permutation(layout, q_ids: np.ndarray) -> np.ndarray:
    """[B, T] int64, rank-major: slot r*L + j of row b holds the row token rank r's slot j holds."""
    cp, balance = layout.cp, layout.balance
    rows, t = q_ids.shape
    if balance == "explicit_indices":
        return np.asarray(layout.indices, np.int64).reshape(rows, t).copy()
    out = np.empty((rows, t), np.int64)
    for b in range(rows):
        per_rank = [[] for _ in range(cp)]
        if balance == "contiguous":
            for r in range(cp):
                per_rank[r].extend(range(r * (t // cp), (r + 1) * (t // cp)))
        elif balance == "dual_chunk_swap":
            _head_tail(per_rank, 0, t, cp)
        elif balance == "head_tail":
            for start, end in head_tail_spans(q_ids[b]):
                _head_tail(per_rank, start, end - start, cp)
        elif balance == "striped":
            stripe = layout.stripe
            for s in range(t // stripe):
                per_rank[s % cp].extend(range(s * stripe, (s + 1) * stripe))
        out[b] = np.concatenate([np.asarray(p, np.int64) for p in per_rank]) if t else np.zeros(0, np.int64)
    return out


def take_rows(x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """x [B, T, ...] with each row's tokens in perm's order (row order -> rank-major)."""
    return np.take_along_axis(x, perm.reshape(perm.shape + (1,) * (x.ndim - 2)), axis=1)


# ------------------------------------------------------------------ inputs and outputs
@dataclass
class RankMajor:
    """A problem cut for the ranks: every array rank-major, tokens split evenly over cp."""

    perm: np.ndarray  # [B, T] int64
    q: np.ndarray  # [B, T, Hq, D] float32
    k: np.ndarray
    v: np.ndarray
    do: Optional[np.ndarray]
    ids: np.ndarray  # [B, T] int32; padding 0
    pos: np.ndarray  # [B, T] int32; padding positions 0 (never read: padding attends nothing)
    tok: np.ndarray  # [B, T] int32: the row token of each slot
    params: np.ndarray  # [4] int32: causal, window left, window right (-1 unbounded), max_segments
    scale: float


def mask_params(batch) -> tuple[int, int, int]:
    """(causal, left, right) of the rank problems' top-left mask: a bottom-right kind is
    written top-left (on self-attention the same token-level mask) with its right side
    unbounded; a window side beyond int32 bounds nothing a position in int32 can reach."""
    kind = batch.mask
    causal = int("causal" in kind)
    left, right = (int(w) for w in batch.window)
    if kind.endswith("bottom_right"):
        right = -1
    clamp = lambda w: -1 if w < 0 or w >= INT32_MAX else w  # noqa: E731
    return causal, clamp(left), clamp(right)


def scale_of(problem) -> float:
    scale = getattr(problem, "scale", None)
    return 1.0 / math.sqrt(problem.head_dim) if scale is None else float(scale)


def rank_major(layout, problem, inputs, with_tensors: bool = True) -> RankMajor:
    """The checked problem with every array in the layout's rank-major order."""
    validate(layout, problem)
    b = problem.batch
    ids = np.asarray(b.q_segment_ids, np.int64)
    pos = np.broadcast_to(np.asarray(b.q_segment_pos, np.int64), ids.shape)
    pos = np.where(ids == 0, 0, pos)
    if pos.max(initial=0) > INT32_MAX:
        raise Unsupported("a position above 2**31 - 1: the ranks hold positions in int32, as the stacks do")
    perm = permutation(layout, ids)
    tok = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    causal, left, right = mask_params(b)
    params = np.array([causal, left, right, b.max_segments], np.int32)
    f32 = lambda x: None if x is None else take_rows(np.asarray(x, np.float32), perm)  # noqa: E731
    rm = RankMajor(perm, None, None, None, None, take_rows(ids, perm).astype(np.int32),
                   take_rows(pos, perm).astype(np.int32), take_rows(tok, perm).astype(np.int32), params,
                   scale_of(problem))
    if with_tensors:
        rm.q, rm.k, rm.v = f32(inputs.q), f32(inputs.k), f32(inputs.v)
        rm.do = f32(inputs.do) if problem.backward else None
    return rm


def check_rank_step(layout, rank: int, step: int) -> None:
    if not (0 <= rank < layout.cp and 0 <= step < steps(layout)):
        raise Unsupported(f"rank {rank}, step {step} is outside the layout's {layout.cp} ranks and "
                          f"{steps(layout)} steps")


def metadata_dict(seqlens_q, offsets_q, cu_q, ragged_q, seqlens_kv, offsets_kv, cu_kv, ragged_kv, count) -> dict:
    """A rank's metadata from its fixed-size arrays: cu_seqlens and ragged_offsets [S+1] of [B*M+1]."""
    s = int(count)
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return {"q_seqlens": i64(seqlens_q), "kv_seqlens": i64(seqlens_kv), "q_offsets": i64(offsets_q),
            "kv_offsets": i64(offsets_kv), "cu_seqlens_q": i64(cu_q)[:s + 1], "cu_seqlens_kv": i64(cu_kv)[:s + 1],
            "ragged_offsets_q": i64(ragged_q)[:s + 1], "ragged_offsets_kv": i64(ragged_kv)[:s + 1]}


def rank_batch_is_packed(ids: np.ndarray, pos: np.ndarray) -> bool:
    """Whether a rank's side, as the layout orders it, is a packed batch (each document one run,
    ids increasing, positions increasing): false only for explicit indices that reorder a rank."""
    for r in range(ids.shape[0]):
        top, last = 0, 0
        for t in range(ids.shape[1]):
            i = int(ids[r, t])
            if i and i == last and pos[r, t] <= pos[r, t - 1]:
                return False
            if i and i != last and i <= top:
                return False
            top, last = max(top, i), i
    return True


def domain(cp_sizes, dtypes=("fp32", "fp16", "bf16")):
    """The runners' Domain: self-attention [B, T] rows, positions in int32, every CP strategy and
    balance, the rank counts the runner starts."""
    from ..domain import Domain

    return Domain(self_attention_only=True, extra_dims=False, max_position=INT32_MAX, dtypes=tuple(dtypes),
                  cp_strategies=CP_STRATEGIES, cp_balances=CP_BALANCES, cp_sizes=tuple(cp_sizes), cp_stripes=())


class HostSide:
    """What both runners do on the host before their ranks run: the layout's checks, the
    permutation and the rank-major cut. ``max_ranks``: the most ranks the runner can start.

    No validate_cp_layout or cp_reorder: each would be the suite's own (the runners check a
    layout as validate_cp does, and reorder by the permutation), which stands in for a backend
    without them."""

    max_ranks = 1

    def unsupported_context_parallel(self, layout, problem):
        return unsupported(layout, problem, self.max_ranks)

    def _checked(self, layout, problem, inputs=None, with_tensors=True):
        if reason := self.unsupported_context_parallel(layout, problem):
            raise Unsupported(reason)
        return rank_major(layout, problem, inputs, with_tensors)

    def cp_permutation(self, layout, problem):
        validate(layout, problem)
        return permutation(layout, np.asarray(problem.batch.q_segment_ids))

