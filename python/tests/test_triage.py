"""Failure triage through `python -m attn_oracle check` and the pytest plugin:
a backend built like TransformerEngine's shipped metadata shows its deep wrong
answer first, each shallow input class once with a decline written in Python."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO

HERE = Path(__file__).parent


def check(tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    return subprocess.run([sys.executable, "-m", "attn_oracle", "check", "te_like_backend:Backend", "--filter",
                           "metadata/matchesReference", "--report", str(tmp_path / "report"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def test_the_deep_wrong_answer_comes_first_and_each_shallow_class_once(tmp_path):
    done = check(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "report" / "conformance.json").read_text())["results"][0]
    clusters = result["clusters"]
    assert clusters[0]["rank"] == "wrong answer on ordinary inputs" and clusters[0]["shown"], clusters
    assert result["failures"][0]["message"].startswith("q_seqlens"), result["failures"][0]
    empty = [c for c in clusters if c.get("input_class") == "a side with no tokens"]
    assert len(empty) == 1 and empty[0]["decline"].startswith("decline in def unsupported_metadata(self, batch): if "), empty
    raised = [c for c in clusters if c["rank"] == "exception or rejection"]
    assert len(raised) == 1 and "ValueError" in raised[0]["key"], raised
    assert sum(c["draws"] for c in clusters) == result["draws"]["failed"]
    assert "[1] wrong answer on ordinary inputs" in done.stdout
    assert "return \"a side with no tokens\"" in done.stdout


def test_the_printed_decline_works_when_pasted_into_the_backend(tmp_path):
    # The decline line is Python that runs: a backend that adds it no longer fails on that class.
    done = check(tmp_path)
    result = json.loads((tmp_path / "report" / "conformance.json").read_text())["results"][0]
    line = next(c["decline"] for c in result["clusters"] if c.get("input_class") == "a side with no tokens")
    condition = line.split(": if ", 1)[1].rsplit(": return ", 1)[0]
    import numpy as np
    from attn_oracle.worker import Batch
    ids = np.array([[1, 1], [0, 0]])
    pos = np.array([[0, 1], [0, 0]])
    batch = Batch(ids, pos, np.array([[1, 1], [1, 1]]), pos, "padding", (-1, -1), 1)
    assert eval(condition, {}, {"batch": batch})
    full = Batch(ids[:1], pos[:1], ids[:1], pos[:1], "padding", (-1, -1), 1)
    assert not eval(condition, {}, {"batch": full})


def test_pytest_shows_the_clusters_deep_bug_first(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path), "-k", "metadata/matchesReference", "--attn-oracle-backend",
                           "te_like_backend:Backend"], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "[1] wrong answer on ordinary inputs" in out, out
    assert out.index("[1] wrong answer on ordinary inputs") < out.index("(a side with no tokens)"), out
    assert "decline in def unsupported_metadata(self, batch)" in out, out
