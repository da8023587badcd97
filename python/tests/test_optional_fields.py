"""The optional metadata fields (max_seqlen_q/kv, indices_q/kv) judged exactly
when a backend returns them, and lse judged at the input dtype's precision for a
backend that declares lse_dtype = "input". Each through `check` on the exec
path, with a wrong twin that must fail naming the field. About 20 s."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from attn_oracle import worker


def check(target, tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    return subprocess.run([sys.executable, "-m", "attn_oracle", "check", f"optional_fields_backends:{target}",
                           "--no-store", "--report", str(tmp_path / "report"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def test_optional_metadata_fields_that_are_right_pass(tmp_path):
    done = check("WithOptionalMetadata", tmp_path, "--filter", "metadata/matchesReference", "--cases", "60")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("target, field", [("MaxSeqlenOfPaddedRows", "max_seqlen_q: backend"),
                                           ("IndicesWithKvStride", "indices_kv[")])
def test_a_wrong_optional_field_fails_naming_it(tmp_path, target, field):
    done = check(target, tmp_path, "--filter", "metadata/matchesReference", "--cases", "60")
    assert done.returncode == 1, done.stdout + done.stderr
    assert field in done.stdout, done.stdout


def test_lse_in_the_input_dtype_passes_when_declared(tmp_path):
    done = check("LseInInputDtype", tmp_path, "--filter", "attention/matchesReference", "--cases", "40")
    assert done.returncode == 0, done.stdout + done.stderr


def test_lse_in_the_input_dtype_fails_at_fp32_precision(tmp_path):
    done = check("LseInInputDtypeUndeclared", tmp_path, "--filter", "attention/matchesReference", "--cases", "40")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "lse" in done.stdout


def test_the_hello_says_lse_dtype_only_when_declared():
    class Plain:
        def attention(self, p, x):
            return {}

    class Input(Plain):
        lse_dtype = "input"

    assert "lse_dtype" not in worker.hello(Plain())
    assert worker.hello(Input())["lse_dtype"] == "input"


def test_an_unknown_lse_dtype_is_refused():
    class Odd:
        lse_dtype = "bf16"

        def attention(self, p, x):
            return {}

    with pytest.raises(TypeError, match="lse_dtype"):
        worker.hello(Odd())
