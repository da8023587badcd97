"""attn_oracle.stacks.megatron against the real Megatron-core (skipped when it does not import):
the metadata backends (packed, and padded as context parallelism pads) pass the metadata properties, the EOD-mask backend the attention
properties, and each planted twin (tests/planted_megatron_backend.py) fails, shrunk small.
About a minute on two cores."""

import pytest

pytest.importorskip("megatron.core", reason="Megatron-core is not installed here: scripts/stacks --only megatron "
                                            "builds the torch venv with megatron-core==0.19.2")

import stack_checks  # noqa: E402
from stack_checks import shrunk_cases  # noqa: E402


def check(tmp_path, target, prop_filter, cases):
    done, results = stack_checks.check(tmp_path, target, "--filter", prop_filter, "--cases", str(cases), "--seed", "1")
    return done, list(results.values())


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
