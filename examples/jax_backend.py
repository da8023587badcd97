"""A JAX backend for attn-oracle: attention through jax.nn.dot_product_attention,
its backward by jax.vjp.

Served with ``python3 -m attn_oracle.worker examples.jax_backend:Backend``
(needs ``jax``; the CPU build is enough). This is the shape a JAX backend takes:
NumPy in, ``jnp.asarray`` at the edge, the library's attention on an explicit
boolean mask, autodiff for the gradients, ``np.asarray`` out. The batch checks
and the mask are the NumPy example's (examples/numpy_backend.py), so what is
judged here is the JAX side: GQA head mapping, scale, the lse and the
gradients. ctest runs `check` on it when jax imports
(python_worker.jax_backend_passes), and skips with a message otherwise.
"""
import jax

jax.config.update("jax_enable_x64", True)  # the suite sends float64; without this JAX silently computes in float32

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from examples.numpy_backend import Backend as NumpyBackend  # noqa: E402


class Backend:
    name, version, token_level_mask = "jax-example", jax.__version__, True
    masks = NumpyBackend()

    def attention(self, p, x):
        rows = self.masks.checked_attention_rows(p, x)
        mask = np.stack([self.masks.row_mask(p.batch, *row) for row in zip(*rows)])  # [R, Tq, Tkv]
        attends = mask.any(-1)  # [R, Tq]
        # A query that attends nothing would take a softmax over nothing (NaN, and NaN
        # gradients): it attends every key instead and its output is zeroed, which also
        # zeroes what flows back through it.
        runnable = jnp.asarray(mask | ~attends[..., None])[:, None]  # [R, 1, Tq, Tkv]
        keep = jnp.asarray(attends, jnp.float64)[..., None, None]  # [R, Tq, 1, 1]
        q, k, v = (jnp.asarray(t) for t in (x.q, x.k, x.v))  # [R, T, H, D]

        def forward(q, k, v):
            o = jax.nn.dot_product_attention(q, k, v, mask=runnable, scale=p.effective_scale, implementation="xla")
            return keep * o

        o, backward = jax.vjp(forward, q, k, v)
        scores = p.effective_scale * jnp.einsum("rqhd,rkhd->rhqk", q, jnp.repeat(k, p.heads_q // p.heads_kv, axis=2))
        lse = jax.nn.logsumexp(jnp.where(jnp.asarray(mask)[:, None], scores, -jnp.inf), axis=-1)  # -inf: no key
        out = {"o": o, "lse": lse}
        if p.backward:
            out.update(zip(("dq", "dk", "dv"), backward(jnp.asarray(x.do))))
        return {name: np.asarray(t) for name, t in out.items()}
