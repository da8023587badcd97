"""`python -m attn_oracle repro`: the standalone script of a counterexample. The planted
example's script fails as the twin does, and the same script pointed at the correct
backend passes; the script imports NumPy and the backend's module only. About 15 s."""

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from attn_oracle import cli

from test_cli import python_m

PLANTED, CORRECT = "examples.planted_numpy_backend", "examples.numpy_backend"


def counterexample(tmp_path, prop):
    """Checks the planted example on one property; returns (the printed repro line, the check's output)."""
    done = python_m("check", f"{PLANTED}:Backend", "--filter", prop, "--cases", "60", "--no-store",
                    "--report", str(tmp_path / "report"), env={"ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    repro = next(line for line in lines if line.startswith("repro: "))[len("repro: "):]
    return repro.split("   (")[0], done.stdout


def run_script(path: Path):
    return subprocess.run([sys.executable, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("prop", ["metadata/matchesReference", "attention/matchesReference"])
def test_the_planted_example_script_fails_and_passes_against_the_correct_backend(tmp_path, prop):
    repro, output = counterexample(tmp_path, prop)
    assert repro.startswith(cli.program_name() + " repro --backend 'exec:"), repro
    # The shrunk case in a line or three, its JSON left in its file.
    assert '"schema"' not in output and ("| q ids" in output or "| q = kv ids" in output), output
    written = subprocess.run(["/bin/sh", "-c", repro], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr
    script = written.stdout
    imports = [line for line in script.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from types import SimpleNamespace", "import numpy as np",
                       f"from {PLANTED} import Backend  # the backend under test"], imports
    if prop.startswith("attention/"):
        assert "budgets = " in script and "# Floats: max |got - expected|" in script
    (tmp_path / "repro.py").write_text(script)
    failed = run_script(tmp_path / "repro.py")
    assert failed.returncode == 1 and "DIFFERS" in failed.stdout and "AssertionError" in failed.stderr, \
        failed.stdout + failed.stderr
    (tmp_path / "fixed.py").write_text(script.replace(f"from {PLANTED} import", f"from {CORRECT} import"))
    fixed = run_script(tmp_path / "fixed.py")
    assert fixed.returncode == 0 and fixed.stdout.rstrip().endswith("PASS"), fixed.stdout + fixed.stderr


def test_repro_of_a_case_the_backend_answers_right_says_so(tmp_path):
    case = REPO / "fixtures" / "design" / "ex1.case.json"
    done = python_m("repro", f"{CORRECT}:Backend", str(case))
    assert done.returncode == 3 and "agrees with the reference" in done.stderr, done.stdout + done.stderr


def test_repro_of_a_context_parallel_case_says_it_has_no_script_and_how_to_replay_it():
    case = REPO / "fixtures" / "design" / "cp_ring_contiguous.case.json"
    done = python_m("repro", "examples.numpy_context_parallel_backend:Backend", str(case))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "a context_parallel case has no standalone script yet" in done.stderr
    assert "python -m attn_oracle replay examples.numpy_context_parallel_backend:Backend" in done.stderr


def test_the_printed_form_and_the_short_form_name_the_same_target():
    printed = ["repro", "--backend", cli.backend_name(f"{PLANTED}:Backend"), "x.case.json", "-o", "r.py"]
    assert cli.python_repro_target(printed) == [f"{PLANTED}:Backend", "x.case.json", "-o", "r.py"]
    assert cli.python_repro_target(["repro", f"{PLANTED}:Backend", "x.case.json"]) == [f"{PLANTED}:Backend", "x.case.json"]
    assert cli.python_repro_target(["repro", "--backend", "cpu", "x.case.json"]) is None  # a C++ backend: GoogleTest
