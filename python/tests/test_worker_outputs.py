"""Optional outputs on the worker side: a backend's ``outputs`` goes into the
hello, a reply leaves out what is not produced, an unknown name is refused, and
a NumPy backend without lse passes `check` with "lse not compared". About 5 s."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO

from attn_oracle import worker


class Declares:
    def __init__(self, outputs):
        self.outputs = outputs

    def attention(self, p, x):
        return {}


def test_the_hello_lists_what_is_produced_all_by_default():
    assert worker.hello(object())["outputs"] == ["lse", "gradients", "small_seq_p"]
    assert worker.hello(Declares(("gradients",)))["outputs"] == ["gradients"]
    assert worker.hello(Declares(()))["outputs"] == []


def test_a_reply_leaves_out_what_is_not_produced():
    result = {name: np.zeros(1) for name in ("o", "lse", "dq", "dk", "dv")}
    assert set(worker._outputs(Declares(("gradients",)), result, ("o", "lse"), True)) == {"o", "dq", "dk", "dv"}
    assert set(worker._outputs(Declares(("lse",)), result, ("o", "lse"), True)) == {"o", "lse"}
    assert set(worker._outputs(object(), result, ("o", "lse"), False)) == {"o", "lse"}


@pytest.mark.parametrize("outputs", [("lse", "o"), "lse", ("gradient",)])
def test_an_unknown_output_is_refused(outputs):
    with pytest.raises(TypeError, match="among"):
        worker.hello(Declares(outputs))


def test_a_backend_without_lse_passes_with_lse_not_compared(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", "no_lse_backend:Backend", "--filter",
                           "attention/", "--cases", "10", "--report", str(tmp_path / "report")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: lse not compared (the backend does not produce it)" in done.stdout
    report = json.loads((tmp_path / "report" / "conformance.json").read_text())
    judged = [r for r in report["results"] if r["verdict"] == "passed"]
    assert judged and all(r["not_compared"] == ["lse"] for r in judged)
