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


# ---- declines, shown against the real library (docs/stacks.md, "Declines, shown")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attn_oracle import worker  # noqa: E402
from attn_oracle.stacks import megatron  # noqa: E402


def test_megatron_answers_an_invalid_batch_without_a_word_so_the_module_declines_it():
    ids = np.array([[1, 2, 1]])  # document 1 is not contiguous: the reference rejects it
    params = megatron.packed_seq_params(ids)  # Megatron-core's data path: no error
    assert params.cu_seqlens_q.tolist() == [0, 1, 2, 3]
    b = worker.Batch(ids, np.array([[0, 0, 0]]), ids, np.array([[0, 0, 0]]), "causal", (-1, -1), 2)
    assert "noncontiguous_segment" in megatron.Backend().unsupported_metadata(b)


def test_megatron_refuses_a_sample_of_no_tokens():
    with pytest.raises(IndexError):
        megatron.packed_seq_params(np.zeros((1, 0), np.int64))


def test_the_padded_path_refuses_a_sample_without_a_token():
    from megatron.core.models.multimodal.context_parallel import get_packed_seq_params

    with pytest.raises(RuntimeError, match="step must be nonzero"):
        get_packed_seq_params(torch.zeros((1, 4), dtype=torch.long), 0, 4, cp_size=2, use_packed_sequence=True)


def test_the_padded_path_takes_padding_after_the_tokens_only():
    from megatron.core.models.multimodal.context_parallel import get_packed_seq_params

    # Its arguments are the tokens and a count of padding at the end: padding before them has no form.
    assert list(__import__("inspect").signature(get_packed_seq_params).parameters)[:3] == ["tokens", "img_seq_len",
                                                                                          "padding_needed"]
