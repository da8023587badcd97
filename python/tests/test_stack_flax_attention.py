"""attn_oracle.stacks.flax_attention against the installed Flax (skipped without
it): it passes the suite, and the planted twin that leaves Flax's answer for a
query that attends nothing unmapped fails and shrinks small."""
import pytest

pytest.importorskip("flax", reason="flax is not installed (scripts/stacks --only flax_attention builds the venv)")

from stack_checks import real_tokens, run_check, shrunk_case  # noqa: E402


def test_flax_passes(tmp_path):
    done, _ = run_check(tmp_path, "attn_oracle.stacks.flax_attention:Backend", "--cases", "25",
                        "--filter", "attention/matchesReference")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:FlaxUnmapped", "--cases", "40",
                        "--filter", "attention/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)
    assert real_tokens(case, "q") <= 2 and real_tokens(case, "kv") <= 2, case


def test_fp16_is_taken(tmp_path):
    """Flax's einsums ask for no precision preset: fp16 compiles under jit on the CPU backend too."""
    done, report = run_check(tmp_path, "planted_jax_stacks:FlaxFp16", "--cases", "15",
                             "--filter", "attention/matchesReference")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert report["results"][0]["draws"]["judged"] >= 14


def test_positions_past_int32_do_not_survive_jax():
    """JAX without x64 holds int32: a position past int32 wraps, so the domain stops at 2**31 - 1."""
    import jax.numpy as jnp
    import numpy as np

    from attn_oracle.stacks import flax_attention

    assert int(jnp.asarray(np.array([2**31 + 5], np.int64))[0]) < 0
    assert flax_attention.Backend.domain.max_position == 2**31 - 1


def test_extreme_integers_are_judged_and_pass(tmp_path):
    """With max_position, positions go to the top of int32 and window sides to INT64_MIN/MAX: judged, not
    declined (an unbounded side written as INT64_MIN once overflowed the module's int32 window)."""
    done, report = run_check(tmp_path, "attn_oracle.stacks.flax_attention:Backend", "--cases", "15",
                             "--filter", "attention/extremeIntegersChangeNothing")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert report["results"][0]["draws"]["judged"] >= 14


def test_fp32_asks_for_fp32_matmuls():
    """XLA's default precision multiplies fp32 in TF32 on a GPU (o 15x over budget on an H100): an fp32 call
    hands Flax precision=HIGHEST, a bf16 call nothing, the twin without it (highest=False) nothing."""
    import re

    import jax
    import jax.numpy as jnp
    import numpy as np

    from attn_oracle.stacks import flax_attention

    ids, pos = jnp.ones((1, 4), jnp.int32), jnp.arange(4, dtype=jnp.int32)[None]
    window = (np.int32(-1), np.int32(-1))

    def precisions(dtype, highest):
        q, kv = jnp.zeros((1, 4, 2, 8), dtype), jnp.zeros((1, 4, 1, 8), dtype)
        text = str(jax.make_jaxpr(lambda q, kv: flax_attention._attend.__wrapped__(
            q, kv, kv, None, ids, pos, ids, pos, window, np.float32(1), causal=False, backward=False,
            fp32_softmax=True, highest=highest))(q, kv))
        return [re.search(r"precision=\(Precision\.HIGHEST", block) is not None
                for block in text.split("dot_general[")[1:]]

    assert precisions(jnp.float32, True) == [True, True]
    assert precisions(jnp.float32, False) == [False, False]
    assert precisions(jnp.bfloat16, True) == [False, False]
