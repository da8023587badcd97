"""What the JAX stack modules share: batch checks, rows, tensors in and out, the forward and its
vjp, fp32's matmul precision, the empty-query mapping, one length a row.

Kept free of any stack import but JAX's own, which the caller has already
imported through :func:`attn_oracle.stacks.require` (so JAX is imported inside
the functions here, never at import: a missing JAX is require's one-line message).
"""

from __future__ import annotations

import numpy as np

from .. import packing
from ..domain import framework_dtypes
from ..errors import Unsupported

# JAX fills masked logits with a large finite negative number (jax.nn: -0.7 x the
# float32 maximum, Flax and MaxText: about the float32 minimum); a softmax over a
# row of them is uniform, and its logsumexp stays near -2.4e38. No logit of a
# query that attends a key comes near this.
EMPTY_LSE = -1e38


def check(batch) -> None:
    """Raise AttnOracleError (the reference's code) for an invalid batch: the stacks do not validate."""
    packing.check(batch)


def check_attention(backend, p) -> None:
    """The reference's error for an invalid batch, then Unsupported for what the module's own
    ``unsupported_attention`` declines (the suite asks it first; a direct call asks here)."""
    check(p.batch)
    if reason := backend.unsupported_attention(p):
        raise Unsupported(reason)


def rows(batch):
    """(q_ids, q_pos, kv_ids, kv_pos), each [R, T] int64 over the broadcast rows."""
    r = packing.rows(batch)
    return r.q_ids, r.q_pos, r.kv_ids, r.kv_pos


def numpy_out(x) -> np.ndarray:
    """A JAX array as NumPy (bfloat16 goes out as float32, which the worker takes)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.kind == "V" or str(x.dtype) == "bfloat16" else x


def check_problem(p, x) -> None:
    if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q is None or x.q.ndim != 4:
        raise Unsupported("heads_q not a multiple of heads_kv, or tensors not [R, T, H, D]")


def tensors(p, x):
    """(q, k, v, do) as JAX arrays in the problem's dtype (do None without backward), the problem checked."""
    import jax.numpy as jnp

    check_problem(p, x)
    dt = framework_dtypes(jnp)[p.dtype]
    q, k, v = (jnp.asarray(t, dtype=dt) for t in (x.q, x.k, x.v))
    return q, k, v, jnp.asarray(x.do, dtype=dt) if p.backward else None


def outputs(p, o, lse, grads) -> dict:
    """The worker's outputs: o, lse [R, Tq, Hq] as ours [R, Hq, Tq] (None: the stack gives none), gradients."""
    out = {"o": numpy_out(o)}
    if lse is not None:
        out["lse"] = np.transpose(numpy_out(lse), (0, 2, 1))
    if p.backward:
        out.update(zip(("dq", "dk", "dv"), (numpy_out(g) for g in grads)))
    return out


def with_vjp(forward, q, k, v, do, backward: bool):
    """(o, lse, (dq, dk, dv) or None) of ``forward(q, k, v) -> (o, lse)``, the gradients by its vjp
    with ``do`` (lse's cotangent 0). Traced inside the caller's jax.jit."""
    import jax
    import jax.numpy as jnp

    if not backward:
        o, lse = forward(q, k, v)
        return o, lse, None
    (o, lse), pullback = jax.vjp(forward, q, k, v)
    return o, lse, pullback((do, jnp.zeros_like(lse)))


def highest_precision(dtype, highest: bool = True) -> bool:
    """Whether a matmul in ``dtype`` asks XLA for its "highest" precision: fp32 as fp32, not
    in the GPU's TF32 default (``highest`` False: XLA's default, as a planted twin asks)."""
    import jax.numpy as jnp

    return bool(highest) and dtype == jnp.float32


def empty_as_ours(o, lse, empty=None):
    """JAX's answer for a query that attends nothing (the mean of the values, lse near -2.4e38)
    as ours: o = 0, lse = -inf (lse [R, Tq, Hq] as float32); ``empty`` adds queries to map."""
    import jax.numpy as jnp

    empty = lse <= EMPTY_LSE if empty is None else (lse <= EMPTY_LSE) | empty  # -inf in fp16 too
    return jnp.where(empty[..., None], jnp.zeros_like(o), o), jnp.where(empty, -jnp.inf, lse.astype(jnp.float32))


def lengths_reason(batch):
    """Why jax.nn's query_seq_lengths / key_value_seq_lengths (one length a row, from token 0)
    cannot say ``batch``, or None."""
    for ids in (batch.q_segment_ids, batch.kv_segment_ids):
        ids = np.asarray(ids).reshape(-1, np.asarray(ids).shape[-1])
        top = ids.max(-1, keepdims=True)
        if (np.where(ids != 0, ids, top) != top).any():
            return "more than one document in a row: query_seq_lengths holds one length per row"
        real = ids != 0
        if (real[:, 1:] & ~real[:, :-1]).any():
            return "a padding token before the document: the sequence lengths count from token 0"
    return None


def sequence_lengths(q_ids, kv_ids):
    """(q_len, kv_len) int32 [R] of rows holding one document each, from token 0; a row whose
    q and kv documents differ attends nothing (both lengths 0)."""
    same = q_ids.max(-1) == kv_ids.max(-1)
    return tuple(np.where(same, (ids != 0).sum(-1), 0).astype(np.int32) for ids in (q_ids, kv_ids))
