"""What the JAX stack modules share: batch checks, rows, dtypes, the empty-query mapping.

Kept free of any stack import but JAX's own, which the caller has already
imported through :func:`attn_oracle.stacks.require`.
"""

from __future__ import annotations

import numpy as np

from ..errors import Unsupported

try:  # the package's batch helpers, when this checkout has them
    from .. import packing as _packing
except ImportError:  # pragma: no cover - older checkouts
    _packing = None

# JAX fills masked logits with a large finite negative number (jax.nn: -0.7 x the
# float32 maximum, Flax and MaxText: about the float32 minimum); a softmax over a
# row of them is uniform, and its logsumexp stays near -2.4e38. No logit of a
# query that attends a key comes near this.
EMPTY_LSE = -1e38


def lse_judged_at_input_dtype() -> bool:
    """Whether this suite honours a backend's ``lse_dtype = "input"`` (judging lse at bf16/fp16 precision)."""
    from .. import worker

    return hasattr(worker, "lse_dtype")


def attention_dtypes(jax, lse_in_input_dtype: bool) -> tuple:
    """The dtypes a JAX attention module takes here.

    fp16 is left out on the CPU backend: the XLA path asks dot_general for the
    F16_F16_F32 preset, which XLA:CPU refuses when compiled under jax.jit (jax.nn
    falls back to the default precision only when the error comes at trace
    time). bf16 is left out for a stack whose lse comes in the input dtype until
    the suite judges it at that precision.
    """
    dtypes = ["fp32", "bf16", "fp16"]
    if jax.default_backend() == "cpu":
        dtypes.remove("fp16")
    if lse_in_input_dtype and not lse_judged_at_input_dtype():
        dtypes.remove("bf16")
    return tuple(dtypes)


def check(batch) -> None:
    """Raise AttnOracleError (the reference's code) for an invalid batch: the stacks do not validate."""
    if _packing is not None and hasattr(_packing, "check"):
        _packing.check(batch)
        return
    from .. import oracle

    oracle.metadata(batch.q_segment_ids, batch.q_segment_pos, batch.kv_segment_ids, batch.kv_segment_pos,
                    mask=batch.mask, max_segments=batch.max_segments, window=batch.window)


def rows(batch):
    """(q_ids, q_pos, kv_ids, kv_pos), each [R, T] int64 over the broadcast rows."""
    if _packing is not None and hasattr(_packing, "rows"):
        r = _packing.rows(batch)
        return r.q_ids, r.q_pos, r.kv_ids, r.kv_pos
    ids = (np.asarray(batch.q_segment_ids), np.asarray(batch.kv_segment_ids))
    pos = (np.asarray(batch.q_segment_pos), np.asarray(batch.kv_segment_pos))
    extra = np.broadcast_shapes(ids[0].shape[:-2], ids[1].shape[:-2])
    out = []
    for i, p in zip(ids, pos):
        for a in (i, p):
            a = np.broadcast_to(a, extra + i.shape[-2:])
            out.append(a.reshape(-1, a.shape[-1]).astype(np.int64))
    return out[0], out[1], out[2], out[3]


def dtype_of(jnp, name: str):
    return {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}[name]


def numpy_out(x) -> np.ndarray:
    """A JAX array as NumPy (bfloat16 goes out as float32, which the worker takes)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.kind == "V" or str(x.dtype) == "bfloat16" else x


def check_problem(p, x) -> None:
    if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q is None or x.q.ndim != 4:
        raise Unsupported("heads_q not a multiple of heads_kv, or tensors not [R, T, H, D]")
