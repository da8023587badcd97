"""Running `python -m attn_oracle check` on a stack module (python/tests/test_stack_*.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO

TESTS = Path(__file__).resolve().parent


def check(tmp_path, target, *args, timeout=900):
    """(the finished run, {property: result dict}) of `check TARGET ARGS`, planted twins importable from here."""
    report = tmp_path / target.replace(":", "-")
    env = {**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures"),
           "PYTHONPATH": os.pathsep.join([str(TESTS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--report", str(report), "--no-store",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    path = report / "conformance.json"
    results = json.loads(path.read_text())["results"] if path.exists() else []
    return done, {r["property"]: r for r in results}


def failed(results):
    return {p for p, r in results.items() if r["verdict"].lower() == "failed"}


def counterexample(done, prop):
    """The shrunk case file a failing property printed, parsed."""
    lines = [line.strip() for line in done.stdout.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("FAILED") and f" {prop} on " in line)
    path = Path(next(l for l in lines[at:] if l.startswith("counterexample")).split(": ", 1)[1])
    return json.loads(path.read_text())
