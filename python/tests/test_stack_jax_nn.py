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
