"""The JAX backends bench/python_bench.py measures, each counting the XLA
compilations its worker ran (jax.monitoring) into $ATTN_ORACLE_BENCH_COMPILES
after every call:
  - Attention: examples/jax_backend.py (one jax.jit over attention and its vjp);
  - AttentionOneSize: the same, declaring the one size it was compiled for
    (Domain sizes: 64 tokens a side, one row, M 8, heads 2/1, head_dim 64), as
    a backend built for fixed shapes would;
  - Metadata: the NumPy example's metadata with each row's token-level mask
    computed under jax.jit, as a JAX metadata backend does (static mask kind and
    M + 1 id counts, so the shapes and M of a draw pick the compilation).
"""
import functools
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attn_oracle import Domain  # noqa: E402
from examples.jax_backend import Backend as JaxAttention  # noqa: E402
from examples.numpy_backend import Backend as NumpyBackend  # noqa: E402

compiles = 0


def _count(event, duration, **kwargs):
    global compiles
    if event.endswith("backend_compile_duration"):
        compiles += 1


jax.monitoring.register_event_duration_secs_listener(_count)


def _record():
    path = os.environ.get("ATTN_ORACLE_BENCH_COMPILES")
    if path:
        with open(path, "w") as f:
            f.write(str(compiles))


@functools.partial(jax.jit, static_argnames=("kind", "ids"))
def row_attends(qi, qp, ki, kp, *, kind, ids):  # one row's [Tq, Tkv] mask, as NumpyBackend.attends
    shift = jnp.zeros(ids, jnp.int64).at[qi].add(1)[qi][:, None] - jnp.zeros(ids, jnp.int64).at[ki].add(1)[ki][None, :]
    d = qp[:, None] - kp[None, :]
    same = (qi[:, None] == ki[None, :]) & (qi[:, None] != 0)
    if kind.endswith("bottom_right"):
        return same & (d >= shift)
    return same & (d >= 0) if "causal" in kind else same


class Attention(JaxAttention):
    name = "jax-example-counted"

    def attention(self, p, x):
        try:
            return super().attention(p, x)
        finally:
            _record()


class AttentionOneSize(Attention):
    name = "jax-example-one-size"
    domain = Domain(extra_dims=False, head_dims=(64,),
                    sizes={"tokens": [64], "rows": [1], "max_segments": [8], "heads": [[2, 1]]})


class Metadata(NumpyBackend):
    name = "jax-metadata-bench"

    def metadata(self, b):
        self.ids = b.max_segments + 1
        try:
            return super().metadata(b)
        finally:
            _record()

    def attends(self, kind, qi, qp, ki, kp):
        return np.asarray(row_attends(qi, qp, ki, kp, kind=kind, ids=self.ids))
