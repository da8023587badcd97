"""What the stack-module tests share (python/tests/test_stack_*.py): `python -m attn_oracle
check TARGET` with python/tests on the path (for the planted twins), its report, and the
shrunk counterexamples it printed."""
import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO

HERE = Path(__file__).parent


def run_check(tmp_path, target, *args, env=None, shape_stable=True):
    """(the finished `check`, its JSON report, {} when none) for TARGET; shape-stable draws by
    default, since the JAX stacks compile per shape."""
    report_dir = tmp_path / target.replace(":", "-")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures"), **(env or {})}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, *(["--shape-stable"] * shape_stable),
                           "--no-store", "--report", str(report_dir), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env=environ)
    report_file = report_dir / "conformance.json"
    return done, json.loads(report_file.read_text()) if report_file.exists() else {}


def check(tmp_path, target, *args):
    """(the finished `check` without shape-stable draws, {property: its result})."""
    done, report = run_check(tmp_path, target, *args, shape_stable=False)
    return done, {r["property"]: r for r in report.get("results", [])}


def failed(results):
    return {p for p, r in results.items() if r["verdict"].lower() == "failed"}


def shrunk_cases(done) -> list:
    """Every counterexample `check` printed, parsed, in order."""
    return [json.loads(Path(line.split(": ", 1)[1].strip()).read_text()) for line in done.stdout.splitlines()
            if line.strip().startswith("counterexample")]


def shrunk_case(done) -> dict:
    """The first counterexample `check` printed."""
    return shrunk_cases(done)[0]


def counterexample(done, prop):
    """The shrunk case file a failing property printed, parsed."""
    lines = [line.strip() for line in done.stdout.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("FAILED") and f" {prop} on " in line)
    path = Path(next(line for line in lines[at:] if line.startswith("counterexample")).split(": ", 1)[1])
    return json.loads(path.read_text())


def _flat(ids):
    return [x for item in ids for x in (_flat(item) if isinstance(item, list) else [item])]


def real_tokens(case: dict, side: str) -> int:
    """Tokens of a side that belong to a document (shape-stable draws keep their 16-token rows, padded)."""
    return sum(1 for x in _flat(case[side]["segment_ids"]) if x != 0)


def documents(case: dict) -> int:
    """Distinct document ids over both sides."""
    return len({x for side in ("q", "kv") for x in _flat(case[side]["segment_ids"]) if x != 0})
