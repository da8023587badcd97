"""The K/V buffer examples (docs/python.md, "The K/V buffer") through `python -m
attn_oracle check`: the metadata-only NumPy backend passes the metadata
properties and is skipped on the rest; the torch backend passes every kv_buffer
property and its planted twin fails the three metadata properties, shrunk to two
one-token documents, with a replay line that reproduces each failure (skipped
with a message where torch does not import). Also the hello of a backend that
serves only part of the capability. About 2 s without torch, 55 s with it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO

import attn_oracle
from attn_oracle import worker
from examples.numpy_kv_buffer_metadata_backend import micro_sequence

METADATA_PROPERTIES = ("kv_buffer/metadataIsCanonical", "kv_buffer/metadataDrivesAttentionLikeTheReference",
                       "kv_buffer/earlierDocumentsDoNotInfluence")
STEP_PROPERTIES = ("kv_buffer/streamingMatchesWholeSequence", "kv_buffer/inactivePrefixReceivesExactlyZero",
                   "kv_buffer/stepsMatchModel")


def check(tmp_path, target, cases):
    """`python -m attn_oracle check TARGET --filter kv_buffer`: the run and its report's verdicts."""
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--filter", "kv_buffer", "--cases",
                           str(cases), "--report", str(tmp_path / "report")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")})
    report = json.loads((tmp_path / "report" / "conformance.json").read_text())
    return done, {r["property"]: r["verdict"] for r in report["results"]}


def needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip(f"{sys.executable} cannot import torch: install a CPU torch (2.5 or newer) to run the torch "
                    "K/V buffer examples")


@pytest.mark.parametrize("doc_lengths, m", [([4, 1, 10], 4), ([1, 1], 1), ([7], 3), ([2, 3, 1, 1, 5], 2), ([5, 5], 10)])
def test_the_metadata_only_example_equals_the_oracle(doc_lengths, m):
    for want in attn_oracle.kv_buffer_metadata(doc_lengths, m):
        got = micro_sequence(doc_lengths, m, want.index)
        for name, value in want.as_dict().items():
            assert np.array_equal(got[name], value), f"micro-sequence {want.index}: {name} {got[name]} vs {value}"


def test_a_metadata_only_backend_serves_kv_buffer_without_steps():
    class MetadataOnly:
        def kv_micro_sequence(self, problem, i):
            return {}

    greeting = worker.hello(MetadataOnly())
    assert greeting["capabilities"] == ["kv_buffer"] and greeting["kv_buffer_steps"] == []


def test_steps_without_kv_micro_sequence_are_refused_by_name():
    class StepsOnly:
        def kv_attend(self, problem, i, micro, buffer, grad_buffer):
            return {}

    with pytest.raises(TypeError, match=r"StepsOnly serves kv_attend but not kv_micro_sequence\(problem, i\)"):
        worker.hello(StepsOnly())


def test_check_judges_the_metadata_only_example_and_skips_the_steps(tmp_path):
    done, verdicts = check(tmp_path, "examples.numpy_kv_buffer_metadata_backend:Backend", 50)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p: verdicts[p] for p in METADATA_PROPERTIES} == dict.fromkeys(METADATA_PROPERTIES, "passed")
    assert {p: verdicts[p] for p in STEP_PROPERTIES} == dict.fromkeys(STEP_PROPERTIES, "skipped")
    assert "serves kv_buffer without the steps write_slice and attend, which this property calls" in done.stdout


def test_check_passes_the_torch_example(tmp_path):
    needs_torch()
    done, verdicts = check(tmp_path, "examples.torch_kv_buffer_backend:Backend", 20)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(verdicts.values()) == {"passed"} and len(verdicts) == 6, verdicts


def test_the_planted_torch_twin_fails_the_metadata_properties_and_each_replays(tmp_path):
    needs_torch()
    done, verdicts = check(tmp_path, "examples.planted_torch_kv_buffer_backend:Backend", 20)
    assert done.returncode == 1, done.stdout + done.stderr
    assert {p for p, v in verdicts.items() if v == "FAILED"} == set(METADATA_PROPERTIES), verdicts
    lines = [line.strip() for line in done.stdout.splitlines()]
    for prop in METADATA_PROPERTIES:
        at = next(i for i, line in enumerate(lines) if line.startswith("FAILED") and f" {prop} on " in line)
        mismatch = lines[at + 2]  # under the cluster heading
        case_path = Path(next(l for l in lines[at:] if l.startswith("counterexample")).split(": ", 1)[1])
        shrunk = json.loads(case_path.read_text())
        assert shrunk["doc_lengths"] == [1, 1] and shrunk["micro_seq_tokens"] == 1, shrunk
        replay = next(l for l in lines[at:] if l.startswith("replay: "))[len("replay: "):]
        replayed = subprocess.run(["/bin/sh", "-c", replay], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert replayed.returncode == 3, replayed.stdout + replayed.stderr
        assert mismatch in replayed.stdout, (mismatch, replayed.stdout)


def test_the_torch_example_streams_like_the_oracle():
    needs_torch()
    from examples.torch_kv_buffer_backend import Backend

    rng = np.random.default_rng(3)
    doc_lengths, m, n = [3, 6, 1, 4], 4, 14
    q, do = (rng.standard_normal((n, 4, 8)) for _ in range(2))
    k, v = (rng.standard_normal((n, 2, 8)) for _ in range(2))
    problem = worker.KvBufferProblem(np.array(doc_lengths), m, 4, 2, 8, None, "fp32", True)
    want = attn_oracle.kv_buffer_stream(q, k, v, doc_lengths=doc_lengths, micro_seq_tokens=m, do=do, dtype="fp32")
    rounded = (t.astype(np.float32).astype(np.float64) for t in (q, k, v, do))  # as the oracle rounds them
    got = Backend().kv_stream(problem, worker.Inputs(*rounded))
    for name in ("o", "lse", "dq", "dk", "dv"):
        np.testing.assert_allclose(got[name], getattr(want, name), rtol=1e-10, atol=1e-12, err_msg=name)
