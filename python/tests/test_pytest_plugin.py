"""The pytest plugin on the example backends: one test item per property of
`attn-oracle check --list`, which passes, skips or fails (with the
counterexample and its replay line) as the property did; the selected items
share one `check` run, and items deselected with -k are not run. Each run is a
pytest in a child process over a few properties with 3 draws: about 10 s in all."""

import os
import shlex
import subprocess
import sys

from support import REPO

from attn_oracle import cli
from attn_oracle.pytest_plugin import property_ids


def run_pytest(directory, *args, env=None):
    """pytest in `directory` (its rootdir), from the repository root so that `examples` imports."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(directory),
                           str(directory), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(directory / "failures"), **(env or {})})


def logging_cli(directory):
    """An ATTN_ORACLE_CLI that logs each of its command lines and runs the real CLI:
    its environment, and a function that returns the `check` runs it logged
    (`check --list` aside) as their --filter values."""
    log = directory / "cli.log"
    script = directory / "logging-cli"
    script.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(log))}\nexec {shlex.quote(cli.bundled_cli())} "$@"\n')
    script.chmod(0o755)

    def check_runs():
        lines = log.read_text().splitlines() if log.exists() else []
        runs = [line.split() for line in lines if line.startswith("check ") and "--list" not in line.split()]
        return [words[words.index("--filter") + 1].split(",") for words in runs]

    return {"ATTN_ORACLE_CLI": str(script)}, check_runs


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


def test_the_selected_items_share_one_check_run(tmp_path):
    env, check_runs = logging_cli(tmp_path)
    done = run_pytest(tmp_path, "-k", SOME, "--attn-oracle-backend", "examples.numpy_backend:Backend",
                      "--attn-oracle-args", "--cases 3", env=env)
    assert done.returncode == 0 and "2 passed, 1 skipped" in done.stdout, done.stdout + done.stderr
    # One check for the three items, on those three only: the 27 deselected ones are not run.
    assert check_runs() == [["metadata/matchesReference", "attention/unattendedTokensAreExactlyZero",
                             "small_seq/matchesReference"]]


def test_a_failing_property_shows_its_counterexample_and_replay_and_repro_lines(tmp_path):
    done = run_pytest(tmp_path, "-k", "metadata/matchesReference", "--attn-oracle-backend",
                      "examples.planted_numpy_backend:Backend", "--attn-oracle-args", "--cases 50")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "counterexample (draw" in done.stdout
    assert " replay --backend 'exec:" in done.stdout and " repro --backend 'exec:" in done.stdout
    # The shrunk case in a line, not its JSON.
    assert "metadata causal_bottom_right" in done.stdout and '"schema"' not in done.stdout


def test_without_a_backend_the_plugin_adds_nothing(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    done = run_pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout and "attn-oracle" not in done.stdout


def test_one_line_in_a_test_module_does_the_same(tmp_path):
    (tmp_path / "test_conformance.py").write_text(
        "from attn_oracle.pytest_plugin import conformance_test\n"
        "test_numpy = conformance_test('examples.numpy_backend:Backend', '--cases', '3')\n")
    env, check_runs = logging_cli(tmp_path)
    done = run_pytest(tmp_path, "-q", "-k", "metadata and (matchesReference or rowsAreIndependent)", env=env)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
    assert check_runs() == [["metadata/matchesReference", "metadata/rowsAreIndependent"]]


def test_a_listed_expected_failure_is_an_xfail(tmp_path):
    (tmp_path / "xfails.txt").write_text("metadata/matchesReference # the planted bottom-right bug\n")
    done = run_pytest(tmp_path, "-k", "metadata/matchesReference", "--attn-oracle-backend",
                      "examples.planted_numpy_backend:Backend",
                      "--attn-oracle-args", f"--cases 50 --xfails {tmp_path / 'xfails.txt'}")
    assert done.returncode == 0 and "1 xfailed" in done.stdout, done.stdout + done.stderr
