"""attn_oracle.stacks.megatron against the real Megatron-core (skipped when it does not import):
the metadata backends (packed, and padded as context parallelism pads) pass the metadata properties, the EOD-mask backend the attention
properties, and each planted twin (tests/planted_megatron_backend.py) fails, shrunk small.
About a minute on two cores."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

pytest.importorskip("megatron.core", reason="Megatron-core is not installed here: scripts/stacks --only megatron "
                                            "builds the torch venv with megatron-core==0.19.2")

HERE = Path(__file__).parent


def check(tmp_path, target, prop_filter, cases):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--filter", prop_filter, "--cases",
                           str(cases), "--seed", "1", "--no-store", "--report", str(tmp_path / "report")],
                          cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    report = json.loads((tmp_path / "report" / "conformance.json").read_text())
    return done, report["results"]


def shrunk_cases(done):
    """The counterexample files a failing run printed."""
    return [json.loads(Path(line.split(": ", 1)[1]).read_text()) for line in done.stdout.splitlines()
            if line.strip().startswith("counterexample")]


def test_the_packed_seq_params_pass_the_metadata_properties(tmp_path):
    done, results = check(tmp_path, "attn_oracle.stacks.megatron:Backend", "metadata/", 30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(r["verdict"] == "passed" for r in results), results


def test_the_padded_packed_seq_params_pass_the_metadata_properties(tmp_path):
    done, results = check(tmp_path, "attn_oracle.stacks.megatron:PaddedBackend", "metadata/", 40)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(r["verdict"] == "passed" for r in results), results


def test_the_eod_mask_under_sdpa_passes_the_attention_properties(tmp_path):
    done, results = check(tmp_path, "attn_oracle.stacks.megatron:EodMaskBackend", "attention/", 15)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(r["verdict"] == "passed" for r in results), results


def test_the_planted_packed_seq_params_fail_shrunk_to_two_rows(tmp_path):
    done, results = check(tmp_path, "planted_megatron_backend:Backend", "metadata/matchesReference", 30)
    assert done.returncode == 1, done.stdout + done.stderr
    cases = shrunk_cases(done)
    assert cases, done.stdout
    ids = cases[0]["q"]["segment_ids"]
    assert len(ids) == 2 and len(ids[0]) <= 2, ids


def test_the_planted_eod_mask_fails_shrunk_to_one_token_documents(tmp_path):
    done, results = check(tmp_path, "planted_megatron_backend:EodMaskBackend", "attention/matchesReference", 30)
    assert done.returncode == 1, done.stdout + done.stderr
    cases = shrunk_cases(done)
    assert cases, done.stdout
    ids = cases[0]["q"]["segment_ids"]
    assert len(ids) == 1 and 2 <= len(ids[0]) <= 3 and len(set(ids[0])) == len(ids[0]), ids
