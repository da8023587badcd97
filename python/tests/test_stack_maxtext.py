"""attn_oracle.stacks.maxtext against the installed MaxText (skipped without
it): its attention op passes the suite, and the planted twin that leaves
MaxText's padding-as-a-segment convention unmapped fails and shrinks small.
MaxText builds its config once per worker (about 20 s)."""
import pytest

pytest.importorskip("maxtext", reason="maxtext is not installed (scripts/stacks --only maxtext builds the venv)")

from stack_checks import real_tokens, run_check, shrunk_case  # noqa: E402


def test_maxtext_passes(tmp_path):
    done, _ = run_check(tmp_path, "attn_oracle.stacks.maxtext:Backend", "--cases", "20",
                        "--filter", "attention/matchesReference")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:MaxTextPaddingUnmapped", "--cases", "40",
                        "--filter", "attention/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)
    assert real_tokens(case, "q") <= 2 and real_tokens(case, "kv") <= 2, case


def test_fp16_is_taken(tmp_path):
    """MaxText's einsums ask for no precision preset: fp16 compiles under jit on the CPU backend too. Every
    draw is judged; none raises. (One of these draws, seed 20261122, has dq 1.10 x over its budget: the
    precision finding fixtures/stacks/maxtext_fp16_gqa_dq.case.json, docs/stacks.md.)"""
    done, report = run_check(tmp_path, "planted_jax_stacks:MaxTextFp16", "--cases", "10",
                             "--filter", "attention/matchesReference")
    assert report["results"][0]["draws"]["judged"] == 10, done.stdout[-4000:] + done.stderr[-2000:]
    assert "raised" not in done.stdout and "exception" not in done.stdout, done.stdout[-4000:]
