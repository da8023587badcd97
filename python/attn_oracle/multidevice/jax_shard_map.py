"""Context parallelism on JAX devices: ``attn_oracle.multidevice.jax_shard_map:Backend``.

Each rank is a JAX device; the row is put in the layout's rank-major order on the host and
split over a 1-D mesh axis ``cp`` by ``shard_map``, so that rank r holds its own tokens'
q, k, v, ids and positions and nothing else. K/V reach the other ranks by real collectives:

- all_gather: ``lax.all_gather`` of k, v, ids, positions and token numbers, put back in row order;
- ring: step s holds the keys of rank (r - s) mod cp after s ``lax.ppermute`` hops; the partial
  (o, lse) of each step merge by lse (lse = logaddexp, o rescaled);
- all_to_all: ``lax.all_to_all`` trades token shards for head shards (q, k, v), each rank attends
  the whole row for its heads, and o and lse go back the same way.

Each rank builds its mask from ids and positions (docs/semantics.md#2-the-attention-mask; bottom-right
kinds written top-left, as the rank problems are: on self-attention the same mask) and its
metadata (docs/semantics.md#3-metadata) from the ids and positions it holds. Gradients are ``jax.vjp`` of the
whole sharded forward, so the collectives' transposes (reduce-scatter of an all_gather, the
reverse ppermutes, the reverse all_to_all) bring dk and dv back to each token's owner.

Precision: float32 arithmetic for every dtype. The suite sends values exactly representable
in the problem's dtype (so in float32), and judges against a naive computation in that dtype;
float32 is what a stack's ranks accumulate in, keeps the lse merge's rounding visible to the
tolerance rule (float64 would hide a merge that loses accuracy), and needs no ``jax_enable_x64``,
a process-wide switch. Ids and positions are int32, as in the stacks: the domain says
``max_position = 2**31 - 1``, and a window side beyond it is unbounded (the same mask).

Devices: on a CPU the ranks are host devices, which XLA makes only when
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` is set before JAX starts its CPU
backend; this module sets N = 8 when the flag is unset (and says so on stderr). With several
accelerators it uses them as they are.
"""

from __future__ import annotations

import functools
import sys

from . import _host

NOTE = _host.ask_for_host_devices()  # before JAX starts its CPU backend
if NOTE:
    print(NOTE, file=sys.stderr)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

try:
    _shard_map = jax.shard_map
except AttributeError:  # jax before 0.6
    from jax.experimental.shard_map import shard_map as _shard_map

from ..errors import Unsupported  # noqa: E402

AXIS = "cp"
HIGHEST = jax.lax.Precision.HIGHEST  # fp32 matmuls in fp32 (a GPU's default would be TF32)


def rank_devices() -> list:
    """The devices ranks run on: the default backend's when it has several, else the host's."""
    devices = jax.devices()
    return devices if len(devices) > 1 else jax.devices("cpu")


# ------------------------------------------------------------------ what one rank computes
def _mask(q_ids, q_pos, k_ids, k_pos, params, window=True):
    """[B, Lq, Lk]: the token-level mask of a top-left kind (params: causal, left, right)."""
    d = q_pos[:, :, None] - k_pos[:, None, :]  # p - s: no wrap, both in [0, 2**31)
    m = (q_ids[:, :, None] == k_ids[:, None, :]) & (q_ids[:, :, None] != 0) & ((params[0] == 0) | (d >= 0))
    if window:  # bounds inclusive: p - left <= s <= p + right
        m = m & ((params[1] < 0) | (d <= params[1])) & ((params[2] < 0) | (-d <= params[2]))
    return m


def _attend(q, k, v, mask, scale):
    """o [B, Lq, Hq, D], lse [B, Hq, Lq] of q against k, v under mask; a query attending
    nothing gets o = 0, lse = -inf, and every gradient stays finite (no inf * 0 anywhere)."""
    group = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    s = jnp.where(mask[:, None], scale * jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=HIGHEST), -jnp.inf)
    top = jax.lax.stop_gradient(s.max(-1))  # a shift: o and lse do not depend on it
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    p = jnp.exp(s - top[..., None])  # exactly 0 where masked
    total = p.sum(-1)
    safe = jnp.where(total > 0, total, 1.0)
    o = jnp.einsum("bhqk,bkhd->bqhd", p / safe[..., None], v, precision=HIGHEST)
    return o, jnp.where(total > 0, top + jnp.log(safe), -jnp.inf)


def _merge(o, lse, o2, lse2):
    """Two partial results over disjoint keys, merged as a ring does."""
    top = jax.lax.stop_gradient(jnp.maximum(lse, lse2))
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    a, b = jnp.exp(lse - top), jnp.exp(lse2 - top)
    total = a + b
    safe = jnp.where(total > 0, total, 1.0)
    wa, wb = (jnp.swapaxes(w / safe, 1, 2)[..., None] for w in (a, b))  # [B, L, H, 1]
    return wa * o + wb * o2, jnp.where(total > 0, top + jnp.log(safe), -jnp.inf)


def _hop(xs, cp):
    """One ring step: every rank sends what it holds to rank r + 1 and receives rank r - 1's."""
    return tuple(jax.lax.ppermute(x, AXIS, [(i, (i + 1) % cp) for i in range(cp)]) for x in xs)


def _gathered_rows(xs, tok):
    """all_gather of each x [B, L, ...] over the ranks, put in row order by the gathered token numbers."""
    order = jnp.argsort(jax.lax.all_gather(tok, AXIS, axis=1, tiled=True), axis=1)
    out = []
    for x in xs:
        g = jax.lax.all_gather(x, AXIS, axis=1, tiled=True)
        out.append(jnp.take_along_axis(g, order.reshape(order.shape + (1,) * (g.ndim - 2)), axis=1))
    return out


def _heads_for_tokens(x, tok_all):
    """all_to_all: a rank's [B, L, H, D] tokens for every head become [B, T, H/cp, D], the whole row
    (row order) for its own heads."""
    order = jnp.argsort(tok_all, axis=1)
    x = jax.lax.all_to_all(x, AXIS, split_axis=2, concat_axis=1, tiled=True)
    return jnp.take_along_axis(x, order[:, :, None, None], axis=1)


def _tokens_for_heads(o, lse, tok_all):
    """The inverse: o [B, T, h, D] and lse [B, h, T] in row order back to each token's owner."""
    o = jnp.take_along_axis(o, tok_all[:, :, None, None], axis=1)
    lse = jnp.take_along_axis(lse, tok_all[:, None, :], axis=2)
    return (jax.lax.all_to_all(o, AXIS, split_axis=1, concat_axis=2, tiled=True),
            jax.lax.all_to_all(lse, AXIS, split_axis=2, concat_axis=1, tiled=True))


def _rank_problems(strategy, cp, q, k, v, ids, pos, tok):
    """Each step's (q, k, v, q_ids, q_pos, kv_ids, kv_pos) of this rank (context_parallel.hpp's
    cp_rank_problem): its own queries against the gathered row; at ring step s, against the keys
    of rank r - s, s hops away; all_to_all, the whole row for its heads. k, v may be None."""
    if strategy == "ring":
        held = tuple(x for x in (k, v, ids, pos) if x is not None)
        for s in range(cp):
            if s:
                held = _hop(held, cp)
            kk, vv = (held[0], held[1]) if k is not None else (None, None)
            yield q, kk, vv, ids, pos, held[-2], held[-1]
    elif strategy == "all_gather":
        if k is None:
            kk, vv, (kid, kpos) = None, None, _gathered_rows((ids, pos), tok)
        else:
            kk, vv, kid, kpos = _gathered_rows((k, v, ids, pos), tok)
        yield q, kk, vv, ids, pos, kid, kpos
    else:
        tok_all = jax.lax.all_gather(tok, AXIS, axis=1, tiled=True)
        rid, rpos = _gathered_rows((ids, pos), tok)
        qkv = [None if x is None else _heads_for_tokens(x, tok_all) for x in (q, k, v)]
        yield (*qkv, rid, rpos, rid, rpos)


def _partials(strategy, cp, q, k, v, ids, pos, tok, params, scale):
    """Each step's (o, lse) of this rank, before any merge."""
    for qq, kk, vv, qid, qpos, kid, kpos in _rank_problems(strategy, cp, q, k, v, ids, pos, tok):
        yield _attend(qq, kk, vv, _mask(qid, qpos, kid, kpos, params), scale)


def _forward(strategy, cp, q, k, v, ids, pos, tok, params, scale):
    """This rank's o [B, L, Hq, D] and lse [B, Hq, L]: the whole run, ring steps merged by lse."""
    o = lse = None
    for part in _partials(strategy, cp, q, k, v, ids, pos, tok, params, scale):
        o, lse = part if o is None else _merge(o, lse, *part)
    if strategy == "all_to_all":
        o, lse = _tokens_for_heads(o, lse, jax.lax.all_gather(tok, AXIS, axis=1, tiled=True))
    return o, lse


def _side_metadata(ids, valid, m):
    """seqlens [B, M], offsets [B, M+1], cu_seqlens and ragged_offsets [B*M+1] (entries past the
    document count S are filler), S: docs/semantics.md#3-metadata from one side's valid tokens."""
    rows, length = ids.shape
    one_hot = (ids[:, :, None] == jnp.arange(1, m + 1, dtype=ids.dtype)) & valid[:, :, None]  # [B, L, M]
    seqlens = one_hot.sum(1, dtype=jnp.int32)
    first = jnp.where(one_hot, jnp.arange(length, dtype=jnp.int32)[None, :, None], length).min(1)
    has = seqlens > 0
    order = jnp.argsort(~has, axis=1, stable=True)  # documents with tokens first, in slot order
    offsets = jnp.where(jnp.take_along_axis(has, order, 1), jnp.take_along_axis(first, order, 1), -1)
    offsets = jnp.concatenate([offsets, jnp.full((rows, 1), -1, jnp.int32)], 1)
    flat_has = has.reshape(-1)
    flat_order = jnp.argsort(~flat_has, stable=True)
    count = flat_has.sum(dtype=jnp.int32)
    lengths = jnp.where(flat_has, seqlens.reshape(-1), 0)[flat_order]
    cu = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(lengths, dtype=jnp.int32)])
    starts = (first + (jnp.arange(rows, dtype=jnp.int32) * length)[:, None]).reshape(-1)[flat_order]
    slot = jnp.arange(rows * m + 1)
    ragged = jnp.where(slot < count, jnp.concatenate([starts, jnp.zeros(1, jnp.int32)]), rows * length)
    return seqlens, offsets, cu, ragged, count


def _metadata(q_ids, q_pos, kv_ids, kv_pos, params, m):
    attends = _mask(q_ids, q_pos, kv_ids, kv_pos, params, window=False)  # metadata ignores the window
    q = _side_metadata(q_ids, attends.any(2), m)
    kv = _side_metadata(kv_ids, attends.any(1), m)
    return (*q[:4], *kv[:4], q[4])


# ------------------------------------------------------------------ the sharded programs
_TOKENS, _LSE, _REPLICATED, _RANKS = P(None, AXIS), P(None, None, AXIS), P(), P(AXIS)


@functools.lru_cache(maxsize=None)
def _mesh(cp: int) -> Mesh:
    return Mesh(np.array(rank_devices()[:cp]), (AXIS,))


@functools.lru_cache(maxsize=None)
def _run_program(strategy: str, cp: int):
    """jit(q, k, v, do, ids, pos, tok, params, scale) -> (o, lse[, (dq, dk, dv)]), all rank-major."""
    def per_rank(q, k, v, ids, pos, tok, params, scale):
        return _forward(strategy, cp, q, k, v, ids, pos, tok, params, scale)

    sharded = _shard_map(per_rank, mesh=_mesh(cp), in_specs=(_TOKENS,) * 6 + (_REPLICATED,) * 2,
                         out_specs=(_TOKENS, _LSE))

    def run(q, k, v, do, ids, pos, tok, params, scale):
        if do is None:
            return sharded(q, k, v, ids, pos, tok, params, scale)
        (o, lse), pull = jax.vjp(lambda q, k, v: sharded(q, k, v, ids, pos, tok, params, scale), q, k, v)
        return o, lse, pull((do, jnp.zeros_like(lse)))  # lse's cotangent: 0

    return jax.jit(run)


@functools.lru_cache(maxsize=None)
def _step_program(strategy: str, cp: int):
    """jit(q, k, v, ids, pos, tok, params, scale) -> every rank's (o, lse) at every step, [cp, steps, ...]."""
    def per_rank(q, k, v, ids, pos, tok, params, scale):
        parts = list(_partials(strategy, cp, q, k, v, ids, pos, tok, params, scale))
        return tuple(jnp.stack([part[i] for part in parts])[None] for i in (0, 1))

    return jax.jit(_shard_map(per_rank, mesh=_mesh(cp), in_specs=(_TOKENS,) * 6 + (_REPLICATED,) * 2,
                              out_specs=(_RANKS, _RANKS)))


@functools.lru_cache(maxsize=None)
def _metadata_program(strategy: str, cp: int, m: int):
    """jit(ids, pos, tok, params) -> every rank's metadata arrays at every step, [cp, steps, ...]."""
    def per_rank(ids, pos, tok, params):
        steps = [_metadata(qid, qpos, kid, kpos, params, m)
                 for _, _, _, qid, qpos, kid, kpos in _rank_problems(strategy, cp, None, None, None, ids, pos, tok)]
        return tuple(jnp.stack([step[i] for step in steps])[None] for i in range(len(steps[0])))

    return jax.jit(_shard_map(per_rank, mesh=_mesh(cp), in_specs=(_TOKENS,) * 3 + (_REPLICATED,),
                              out_specs=(_RANKS,) * 9))


# ------------------------------------------------------------------ the backend
def _out(x) -> np.ndarray:
    return np.asarray(x)


class Backend(_host.HostSide):
    """The context_parallel capability on JAX devices (module docstring)."""

    name = "jax-shard_map"
    version = jax.__version__
    token_level_mask = True  # every rank's mask comes from ids and positions, on any input

    def __init__(self):
        self.max_ranks = len(rank_devices())
        self.domain = _host.domain(range(1, self.max_ranks + 1))

    def cp_rank_metadata(self, layout, problem, rank, step):
        rm = self._checked(layout, problem, with_tensors=False)
        _host.check_rank_step(layout, rank, step)
        self._check_rank_order(layout, rm, rank, step)
        program = _metadata_program(layout.strategy, layout.cp, int(problem.batch.max_segments))
        arrays = program(rm.ids, rm.pos, rm.tok, rm.params)
        return _host.metadata_dict(*(np.asarray(a)[rank, step] for a in arrays))

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        rm = self._checked(layout, problem, inputs)
        _host.check_rank_step(layout, rank, step)
        o, lse = _step_program(layout.strategy, layout.cp)(rm.q, rm.k, rm.v, rm.ids, rm.pos, rm.tok, rm.params,
                                                             np.float32(rm.scale))
        return {"o": _out(o[rank, step]), "lse": _out(lse[rank, step])}

    def cp_attention(self, layout, problem, inputs):
        rm = self._checked(layout, problem, inputs)
        out = _run_program(layout.strategy, layout.cp)(rm.q, rm.k, rm.v, rm.do, rm.ids, rm.pos, rm.tok, rm.params,
                                                        np.float32(rm.scale))
        result = {"o": _out(out[0]), "lse": _out(out[1])}
        if problem.backward:
            result.update(zip(("dq", "dk", "dv"), (_out(g) for g in out[2])))
        return result

    @staticmethod
    def _check_rank_order(layout, rm, rank, step):
        """Explicit indices may order a rank's tokens against the row: its problem is then no
        packed batch, and docs/semantics.md#3-metadata defines no metadata for it."""
        if layout.balance != "explicit_indices":
            return
        local = rm.ids.shape[1] // layout.cp
        for r in ({rank, (rank - step) % layout.cp} if layout.strategy != "all_to_all" else ()):
            part = slice(r * local, (r + 1) * local)
            if not _host.rank_batch_is_packed(rm.ids[:, part], rm.pos[:, part]):
                raise Unsupported(f"explicit indices that put rank {r}'s tokens out of row order: its problem is not "
                                  "a packed batch, whose metadata docs/semantics.md#3-metadata defines")
