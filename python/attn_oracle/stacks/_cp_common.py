"""What the context-parallel (CP) stack modules share: the layout's names, the domain's CP fields,
the spans a head_tail layout splits, and a rank's problem written as an ordinary packed batch.

The contract is model/include/attn_oracle/model/context_parallel.hpp (the permutation, the rank
problem) and reference/include/attn_oracle/reference/context_parallel.hpp (the rank metadata:
docs/semantics.md#3-metadata on the rank problem). A layout is any object with ``cp``,
``strategy``, ``balance``, ``stripe`` and ``indices`` (attn_oracle.worker.Layout). No stack is
imported here.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable

import numpy as np

from ..domain import CP_BALANCES, CP_STRATEGIES, Domain, is_bottom_right

__all__ = ["cp_domain", "head_tail_spans", "rank_tokens", "rank_batch", "source_rank",
           "rows_of", "union_span", "fake_process_group",
           "check_layout_alone"]

def cp_domain(*, cp_strategies=(), cp_balances=(), cp_sizes=(), cp_stripes=(), **domain) -> Domain:
    """A Domain with its context-parallel fields (``Domain.cp_strategies`` etc.), the names checked."""
    for name in cp_strategies:
        assert name in CP_STRATEGIES, name
    for name in cp_balances:
        assert name in CP_BALANCES, name
    return Domain(**domain, cp_strategies=tuple(cp_strategies), cp_balances=tuple(cp_balances),
                  cp_sizes=tuple(cp_sizes), cp_stripes=tuple(cp_stripes))


def source_rank(layout: Any, rank: int, step: int) -> int:
    """The rank whose keys ``rank`` meets at ``step`` ((rank - step) mod cp under ring)."""
    return (rank - step) % int(layout.cp) if layout.strategy == "ring" else rank


def rows_of(problem: Any) -> tuple[np.ndarray, np.ndarray]:
    """The q side's ids and positions [B, T] (CP takes self-attention on [B, T] rows only)."""
    ids = np.asarray(problem.batch.q_segment_ids, np.int64)
    pos = np.broadcast_to(np.asarray(problem.batch.q_segment_pos, np.int64), ids.shape)
    if ids.ndim != 2:
        raise ValueError(f"context parallelism splits [B, T] rows; these ids have shape {ids.shape}")
    return ids, pos


def head_tail_spans(ids_row: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each span head_tail splits in one row: a document with the padding after it
    (what ``cu_seqlens_padded`` describes), or a row's leading padding alone."""
    ids_row = np.asarray(ids_row)
    t, out, i = len(ids_row), [], 0
    while i < t:
        j = i + 1
        if ids_row[i] == 0:
            while j < t and ids_row[j] == 0:
                j += 1
        else:
            while j < t and (ids_row[j] == 0 or ids_row[j] == ids_row[i]):
                j += 1
        out.append((i, j))
        i = j
    return out


def rank_tokens(perm: np.ndarray, cp: int, rank: int) -> np.ndarray:
    """[B, L]: the row tokens rank ``rank`` holds, in its local order, from a rank-major permutation."""
    perm = np.asarray(perm, np.int64)
    local = perm.shape[1] // cp
    return perm[:, rank * local:(rank + 1) * local]


def rank_batch(layout: Any, problem: Any, perm: np.ndarray, rank: int, step: int) -> dict:
    """The contract's rank problem as a packed batch (the keyword arguments of
    :func:`attn_oracle.metadata`): q the rank's tokens in local order (all_to_all: the whole row),
    kv the whole row in row order (all_gather, all_to_all) or the local tokens of the source
    rank (ring), bottom-right kinds written top-left (window right unbounded)."""
    ids, pos = rows_of(problem)
    b, t = ids.shape
    whole = np.broadcast_to(np.arange(t), (b, t))
    q_tok = whole if layout.strategy == "all_to_all" else rank_tokens(perm, layout.cp, rank)
    kv_tok = rank_tokens(perm, layout.cp, source_rank(layout, rank, step)) if layout.strategy == "ring" else whole
    mask, window = problem.batch.mask, tuple(int(w) for w in problem.batch.window)
    if is_bottom_right(mask):
        mask = mask.replace("_bottom_right", "")
        window = (window[0], -1)
    take = lambda a, tok: np.take_along_axis(a, tok, axis=1)  # noqa: E731
    return {"q_segment_ids": take(ids, q_tok), "q_segment_pos": take(pos, q_tok),
            "kv_segment_ids": take(ids, kv_tok), "kv_segment_pos": take(pos, kv_tok),
            "mask": mask, "window": window, "max_segments": int(problem.batch.max_segments)}


def union_span(spans: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """(start, length) covering spans (start, length): the tokens from the first start to the last end."""
    spans = [(int(a), int(n)) for a, n in spans]
    start = min(a for a, _ in spans)
    return start, max(a + n for a, n in spans) - start


_FAKE_PG_LOCK = threading.Lock()


@contextlib.contextmanager
def fake_process_group(rank: int, world_size: int):
    """torch's fake default process group (``torch.testing._internal.distributed.fake_pg``): the
    ``get_rank`` / ``get_world_size`` of rank ``rank`` of ``world_size``, no data moved; for stack
    code that asks them of torch.distributed while the module computes one rank's share."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    with _FAKE_PG_LOCK:
        if dist.is_initialized():
            raise RuntimeError("a default process group exists already; the fake one would replace it")
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        try:
            yield
        finally:
            dist.destroy_process_group()


def check_layout_alone(layout) -> None:
    """The contract's first precondition (cp_bad_layout), on the layout the module is asked to run,
    before any library call: at least one rank, a stripe of at least one token, indices only for
    explicit_indices. What the module is asked, not what it hands the library."""
    from ..errors import AttnOracleError

    cp = int(layout.cp)
    if cp < 1:
        raise AttnOracleError("cp_bad_layout", f"cp = {cp}: a layout needs at least one rank")
    if layout.balance == "striped" and int(getattr(layout, "stripe", 1)) < 1:
        raise AttnOracleError("cp_bad_layout", f"stripe = {layout.stripe}: a stripe holds at least one token")
    indices = getattr(layout, "indices", None)
    if layout.balance != "explicit_indices" and indices is not None and np.size(indices) > 0:
        raise AttnOracleError("cp_bad_layout", f"indices given to the {layout.balance} balance: only explicit_indices "
                                               "takes them")
