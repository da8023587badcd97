"""attn_oracle.stacks.jax_nn against the installed JAX (skipped without it):
both paths pass the suite, and the planted twin that leaves jax.nn's answer for
a query that attends nothing unmapped fails and shrinks small."""
import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only jax_nn builds the venv)")

from stack_checks import real_tokens, run_check, shrunk_case  # noqa: E402


@pytest.mark.parametrize("target", ["attn_oracle.stacks.jax_nn:Backend", "attn_oracle.stacks.jax_nn:Lengths"])
def test_jax_nn_passes(tmp_path, target):
    done, report = run_check(tmp_path, target, "--cases", "25", "--filter", "attention/matchesReference")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, report = run_check(tmp_path, "planted_jax_stacks:JaxNnUnmapped", "--cases", "40",
                             "--filter", "attention/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)
    assert real_tokens(case, "q") <= 2 and real_tokens(case, "kv") <= 2, case


def test_fp16_is_declined_only_where_jax_refuses_it():
    """Under jax.jit on the CPU backend, XLA:CPU refuses the F16_F16_F32 preset jax.nn asks for."""
    import jax
    import jax.numpy as jnp

    from attn_oracle.stacks import jax_nn

    if jax.default_backend() != "cpu":
        assert "fp16" in jax_nn.DTYPES
        return
    q, kv = jnp.ones((1, 16, 2, 8), jnp.float16), jnp.ones((1, 16, 1, 8), jnp.float16)
    with pytest.raises(ValueError, match="F16_F16_F32"):
        jax.jit(lambda q, kv: jax.nn.dot_product_attention(q, kv, kv, implementation="xla"))(q, kv)
    jax.jit(lambda q, kv: jax.nn.dot_product_attention(q, kv, kv, implementation="xla"))(q.astype(jnp.bfloat16),
                                                                                      kv.astype(jnp.bfloat16))
    assert jax_nn.DTYPES == ("fp32", "bf16")


def _dot_precisions(fn, *args):
    """The precision of every dot_general in fn's jaxpr (None where it asks for none)."""
    import re

    import jax

    text = str(jax.make_jaxpr(fn)(*args))
    return [m.group(1) if m else None for m in (re.search(r"precision=\((Precision\.\w+)", block)
                                                for block in text.split("dot_general[")[1:])]


@pytest.mark.parametrize("path", ["_segments", "_lengths"])
def test_fp32_asks_for_fp32_matmuls(path):
    """XLA's default precision multiplies fp32 in TF32 on a GPU (o 12x over budget on an H100): an fp32 call
    asks for HIGHEST, a bf16 call for nothing, and the twin without it (highest=False) for nothing."""
    import jax.numpy as jnp
    import numpy as np

    from attn_oracle.stacks import jax_nn

    ids, lengths, window = jnp.ones((1, 4), jnp.int32), jnp.full((1,), 4, jnp.int32), (np.int32(5), np.int32(5))
    fn = getattr(jax_nn, path).__wrapped__
    extra = (ids, ids) if path == "_segments" else (lengths, lengths)

    def precisions(dtype, highest):
        q, kv = jnp.zeros((1, 4, 2, 8), dtype), jnp.zeros((1, 4, 1, 8), dtype)
        return _dot_precisions(lambda q, kv: fn(q, kv, kv, None, *extra, np.float32(0.3), window, causal=False,
                                                backward=False, highest=highest), q, kv)

    assert precisions(jnp.float32, True) == ["Precision.HIGHEST"] * 2
    assert precisions(jnp.float32, False) == [None] * 2
    assert precisions(jnp.bfloat16, True) == [None] * 2
