"""What the stack-module tests share: `python -m attn_oracle check TARGET` with
shape-stable draws (the JAX stacks compile per shape), its report and the
shrunk counterexample it printed."""
import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO

HERE = Path(__file__).parent


def run_check(tmp_path, target, *args, env=None):
    """(the finished `check`, its JSON report) for TARGET, with python/tests on the path."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures"), **(env or {})}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--shape-stable", "--no-store",
                           "--report", str(tmp_path / "report"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env=environ)
    report_file = tmp_path / "report" / "conformance.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return done, report


def shrunk_case(done) -> dict:
    """The counterexample `check` printed (the first one)."""
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("counterexample"))
    return json.loads(Path(line.split(": ", 1)[1].strip()).read_text())


def _flat(ids):
    return [x for item in ids for x in (_flat(item) if isinstance(item, list) else [item])]


def real_tokens(case: dict, side: str) -> int:
    """Tokens of a side that belong to a document (shape-stable draws keep their 16-token rows, padded)."""
    return sum(1 for x in _flat(case[side]["segment_ids"]) if x != 0)


def documents(case: dict) -> int:
    """Distinct document ids over both sides."""
    return len({x for side in ("q", "kv") for x in _flat(case[side]["segment_ids"]) if x != 0})
