"""What the JAX stack modules share: batch checks, rows, dtype names, the empty-query mapping.

Kept free of any stack import but JAX's own, which the caller has already
imported through :func:`attn_oracle.stacks.require`.
"""

from __future__ import annotations

import numpy as np

from .. import packing
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


def dtype_of(jnp, name: str):
    return {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}[name]


def numpy_out(x) -> np.ndarray:
    """A JAX array as NumPy (bfloat16 goes out as float32, which the worker takes)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.kind == "V" or str(x.dtype) == "bfloat16" else x


def check_problem(p, x) -> None:
    if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q is None or x.q.ndim != 4:
        raise Unsupported("heads_q not a multiple of heads_kv, or tensors not [R, T, H, D]")
