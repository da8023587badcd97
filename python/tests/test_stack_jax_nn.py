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
