"""attn_oracle.stacks.hf_transformers against the real transformers: `check`
passes every metadata path and the SDPA attention path, and the planted twin
(python/tests/planted_hf_transformers.py, packed rows merged for B > 1) fails,
shrunk to two rows. Skipped, saying why, where transformers (5.24 checked) or
torch is absent: scripts/stacks makes the venv. About 2-4 minutes on 2 CPU cores."""

import pytest

pytest.importorskip("torch", reason="torch is not installed: scripts/stacks --only hf_transformers makes a venv with it")
pytest.importorskip("transformers", reason="transformers is not installed: scripts/stacks --only hf_transformers "
                                           "makes a venv with it")

import numpy as np  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402

from attn_oracle import oracle, worker  # noqa: E402
from attn_oracle.stacks import hf_transformers  # noqa: E402


def batch(ids, pos, mask="causal", window=(-1, -1), m=4):
    return worker.Batch(np.array(ids), np.array(pos), np.array(ids), np.array(pos), mask, window, m)


def reference(b):
    return oracle.metadata(b.q_segment_ids, b.q_segment_pos, b.kv_segment_ids, b.kv_segment_pos, mask=b.mask,
                           window=b.window, max_segments=b.max_segments).as_dict()


@pytest.mark.parametrize("backend", [hf_transformers.PositionIdsMetadata, hf_transformers.CollatorMetadata])
def test_packed_metadata_equals_the_reference(backend):
    b = batch([[1, 1, 2, 3, 3, 3], [1, 1, 1, 1, 2, 2]], [[0, 1, 0, 0, 1, 2], [0, 1, 2, 3, 0, 1]])
    got, want = backend().metadata(b), reference(b)
    for name, value in want.items():
        assert np.array_equal(got[name], value), (name, got[name], value)
    assert got["max_seqlen_q"] == got["max_seqlen_kv"] == 4


def test_unpad_metadata_gives_indices_of_a_left_padded_mask():
    b = batch([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]], [[0, 0, 0, 1], [0, 1, 2, 3], [0, 0, 0, 0]],
              mask="padding_causal", m=1)
    got, want = hf_transformers.UnpadMetadata().metadata(b), reference(b)
    for name, value in want.items():
        assert np.array_equal(got[name], value), (name, got[name], value)
    assert got["indices_q"].tolist() == got["indices_kv"].tolist() == [2, 3, 4, 5, 6, 7]
    assert got["max_seqlen_q"] == 4


# The unpad path takes one document a row: most drawn rows pack several, and are declined.
@pytest.mark.parametrize("target, filt, cases, least", [
    ("PositionIdsMetadata", "metadata/", 20, 15), ("UnpadMetadata", "metadata/", 40, 4),
    ("CollatorMetadata", "metadata/", 20, 15), ("SdpaAttention", "attention/", 20, 15)])
def test_check_passes(tmp_path, target, filt, cases, least):
    done, results = check(tmp_path, f"attn_oracle.stacks.hf_transformers:{target}", "--filter", filt, "--cases",
                          str(cases), "--seed", "3")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    judged = [r["draws"]["judged"] for r in results.values() if r["verdict"] == "passed"]
    assert judged and max(judged) >= least, results


def test_the_planted_twin_merges_packed_rows_and_is_shrunk_to_two_rows(tmp_path):
    done, results = check(tmp_path, "planted_hf_transformers:MergesRowsForManyRows", "--filter",
                          "metadata/matchesReference", "--cases", "50", "--seed", "1")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "metadata/matchesReference" in failed(results)
    ids = np.asarray(counterexample(done, "metadata/matchesReference")["q"]["segment_ids"])
    assert ids.shape[0] == 2 and ids.shape[1] <= 3, ids.tolist()


# ---- declines, shown against the real library (docs/stacks.md, "Declines, shown")
import inspect  # noqa: E402

import torch  # noqa: E402

fa_utils = hf_transformers.fa_utils


def test_transformers_answers_invalid_position_ids_without_a_word_so_the_module_declines_them():
    cu, _ = fa_utils.prepare_fa_kwargs_from_position_ids(torch.tensor([[0, 2, 1]]))  # positions that decrease
    assert cu[0].tolist() == [0, 3]
    b = batch([[1, 1, 1]], [[0, 2, 1]])
    assert "positions_not_increasing" in hf_transformers.PositionIdsMetadata().unsupported_metadata(b)


def test_transformers_refuses_empty_position_ids():
    with pytest.raises(RuntimeError):
        fa_utils.prepare_fa_kwargs_from_position_ids(torch.zeros((1, 0), dtype=torch.long))


def test_extra_dims_are_mapped_as_rows_not_declined():
    # [2, 1, 3]: two vmapped slices of one row each. transformers reads [..., B, T] position_ids as
    # rows in order; the module flattens the extra dims into rows and gives the fields back in shape.
    cu, _ = fa_utils.prepare_fa_kwargs_from_position_ids(torch.tensor([[[0, 1, 0]], [[0, 1, 2]]]))
    assert cu[0].tolist() == [0, 2, 3, 6]
    b = batch([[[1, 1, 2]], [[1, 1, 1]]], [[[0, 1, 0]], [[0, 1, 2]]], m=2)
    got, want = hf_transformers.PositionIdsMetadata().metadata(b), reference(b)
    for name, value in want.items():
        assert np.array_equal(got[name], value), (name, got[name], value)


def test_transformers_reads_documents_off_the_positions_so_positions_must_count_from_zero():
    # Two documents, the first at offset positions [3, 4, 5] (continued from an earlier window):
    # transformers' flash path starts a document where the position is the row's minimum, so it
    # reads [0, 1] as the start of the row's only document boundary and [3, 4, 5] as nothing of
    # its own. Positions are transformers' document boundaries: offset ones say another batch.
    cu, _ = fa_utils.prepare_fa_kwargs_from_position_ids(torch.tensor([[3, 4, 5, 0, 1]]))
    assert cu[0].tolist() != [0, 3, 5]
    assert "do not count from 0" in hf_transformers._outside(batch([[1, 1, 1, 2, 2]], [[3, 4, 5, 0, 1]]))


def test_a_2d_attention_mask_holds_one_sequence_a_row():
    _, cu, _ = fa_utils._get_unpad_data(torch.tensor([[1, 1, 1, 1]]))  # a row packing two documents
    assert cu.tolist() == [0, 4]
    b = batch([[1, 1, 2, 2]], [[0, 1, 0, 1]], mask="padding_causal")
    assert "more than one document" in hf_transformers.UnpadMetadata().unsupported_metadata(b)


def test_the_packed_masks_are_causal_only():
    assert "position_ids" not in inspect.signature(hf_transformers.masking_utils.create_bidirectional_mask).parameters
    assert "no_mask" not in hf_transformers.SdpaAttention.domain.mask_kinds


@pytest.mark.parametrize("window", [(-1, -1), (1, -1)])
def test_the_mask_builders_get_their_cache_by_position_as_5_17_and_5_24_both_take_it(monkeypatch, window):
    # The fourth parameter of create_causal_mask / create_sliding_window_causal_mask is
    # past_key_values in 5.17 (the device image's release) and cache in 5.24: a keyword would
    # fail on one of them (TypeError on the H100, bench/results/2026-11-26-nvidia-h100-stacks-torch.md).
    for name in ("create_causal_mask", "create_sliding_window_causal_mask"):
        real = getattr(hf_transformers.masking_utils, name)
        def as_in_5_17(config, inputs_embeds, attention_mask, past_key_values, position_ids=None, _real=real):
            return _real(config, inputs_embeds, attention_mask, past_key_values, position_ids=position_ids)
        monkeypatch.setattr(hf_transformers.masking_utils, name, as_in_5_17)
    b = batch([[1, 1, 2, 2, 2]], [[0, 1, 0, 1, 2]], window=window)
    mask = hf_transformers.SdpaAttention().mask(b, torch.empty(1, 5, 1))
    assert mask is not None and not bool(mask[0, 0, 2, 1]) and bool(mask[0, 0, 4, 3]), mask  # two documents
