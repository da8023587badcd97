"""The pytest plugin on the example backends: one test item per property of
`attn-oracle check --list`, which passes, skips or fails (with the
counterexample and its replay line) as the property did. Each run is a pytest
in a child process over a few properties with 3 draws: about 10 s in all."""

import os
import subprocess
import sys

from support import REPO

from attn_oracle.pytest_plugin import property_ids


def run_pytest(directory, *args):
    """pytest in `directory` (its rootdir), from the repository root so that `examples` imports."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(directory),
                           str(directory), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(directory / "failures")})


SOME = "metadata/matchesReference or attention/unattendedTokensAreExactlyZero or small_seq/matchesReference"


def test_every_property_becomes_one_test_item(tmp_path):
    done = run_pytest(tmp_path, "--collect-only", "-q", "--attn-oracle-backend", "examples.numpy_backend:Backend")
    items = [line for line in done.stdout.splitlines() if line.startswith("attn-oracle[")]
    assert items == [f"attn-oracle[examples.numpy_backend:Backend]::{p}" for p in property_ids()], done.stdout
    assert done.returncode == 0


def test_items_pass_and_skip_as_their_properties_did(tmp_path):
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nattn_oracle_backend = examples.numpy_backend:Backend\nattn_oracle_args = --cases 3\n")
    done = run_pytest(tmp_path, "-k", SOME, "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 1 skipped" in done.stdout and "lacks the small_seq capability" in done.stdout


def test_a_failing_property_shows_its_counterexample_and_replay_line(tmp_path):
    done = run_pytest(tmp_path, "-k", "metadata/matchesReference", "--attn-oracle-backend",
                      "examples.planted_numpy_backend:Backend", "--attn-oracle-args", "--cases 50")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "counterexample (draw" in done.stdout
    assert " replay --backend 'exec:" in done.stdout


def test_without_a_backend_the_plugin_adds_nothing(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    done = run_pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout and "attn-oracle" not in done.stdout


def test_one_line_in_a_test_module_does_the_same(tmp_path):
    (tmp_path / "test_conformance.py").write_text(
        "from attn_oracle.pytest_plugin import conformance_test\n"
        "test_numpy = conformance_test('examples.numpy_backend:Backend', '--cases', '3')\n")
    done = run_pytest(tmp_path, "-q", "-k", "matchesReference and metadata")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_a_listed_expected_failure_is_an_xfail(tmp_path):
    (tmp_path / "xfails.txt").write_text("metadata/matchesReference # the planted bottom-right bug\n")
    done = run_pytest(tmp_path, "-k", "metadata/matchesReference", "--attn-oracle-backend",
                      "examples.planted_numpy_backend:Backend",
                      "--attn-oracle-args", f"--cases 50 --xfails {tmp_path / 'xfails.txt'}")
    assert done.returncode == 0 and "1 xfailed" in done.stdout, done.stdout + done.stderr
