"""A JAX backend for attn-oracle: attention through jax.nn.dot_product_attention,
its backward by jax.vjp, the two under one jax.jit.

Served with ``python3 -m attn_oracle.worker examples.jax_backend:Backend``
(needs ``jax``; the CPU build is enough). This is the shape a JAX backend takes:
NumPy in, ``jnp.asarray`` at the edge, the library's attention on an explicit
boolean mask, autodiff for the gradients, ``np.asarray`` out. The batch checks
and the mask are the NumPy example's (examples/numpy_backend.py), so what is
judged here is the JAX side: GQA head mapping, scale, the lse and the
gradients. ctest runs `check` on it when jax imports
(python_worker.jax_backend_passes), and skips with a message otherwise.

Every draw has new shapes, so each one compiles once (jit); op-by-op dispatch
would compile every operation of the attention separately and cost ten times
as much.
"""
import jax

jax.config.update("jax_enable_x64", True)  # the suite sends float64; without this JAX silently computes in float32

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from .numpy_backend import Backend as NumpyBackend  # noqa: E402


@jax.jit
def attention_and_gradients(q, k, v, do, mask, scale):  # q, do [R, Tq, Hq, D]; k, v [R, Tkv, Hkv, D]; mask [R, Tq, Tkv]
    attends = mask.any(-1)
    # A query that attends nothing would take a softmax over nothing (NaN, and NaN
    # gradients): it attends every key instead and its output is zeroed, which also
    # zeroes what flows back through it.
    runnable = (mask | ~attends[..., None])[:, None]  # [R, 1, Tq, Tkv]
    keep = attends[..., None, None].astype(q.dtype)  # [R, Tq, 1, 1]

    def forward(q, k, v):
        return keep * jax.nn.dot_product_attention(q, k, v, mask=runnable, scale=scale, implementation="xla")

    o, backward = jax.vjp(forward, q, k, v)
    scores = scale * jnp.einsum("rqhd,rkhd->rhqk", q, jnp.repeat(k, q.shape[2] // k.shape[2], axis=2))
    lse = jax.nn.logsumexp(jnp.where(mask[:, None], scores, -jnp.inf), axis=-1)  # [R, Hq, Tq]; -inf: no key
    return o, lse, backward(do)


class Backend:
    name, version, token_level_mask = "jax-example", jax.__version__, True
    masks = NumpyBackend()

    def attention(self, p, x):
        rows = self.masks.checked_attention_rows(p, x)
        mask = np.stack([self.masks.row_mask(p.batch, *row) for row in zip(*rows)])
        do = x.do if p.backward else np.zeros_like(x.q)
        o, lse, (dq, dk, dv) = attention_and_gradients(x.q, x.k, x.v, do, mask, p.effective_scale)
        out = {"o": o, "lse": lse} | ({"dq": dq, "dk": dk, "dv": dv} if p.backward else {})
        return {name: np.asarray(t) for name, t in out.items()}
