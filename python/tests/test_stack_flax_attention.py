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
