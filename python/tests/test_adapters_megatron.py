"""attn_oracle.adapters.megatron_packed_to_batch: Megatron-core's packed-sequence metadata
(flat or per-sample cu_seqlens, with or without cu_seqlens_padded) as our batch, checked by
hand and through the oracle's own metadata; refusals with their code. Needs no Megatron."""

import numpy as np
import pytest

from attn_oracle import AttnOracleError, adapters, oracle


def meta(batch):
    return oracle.metadata(batch["q_segment_ids"], batch["q_segment_pos"], batch["kv_segment_ids"],
                           batch["kv_segment_pos"], mask=batch["mask"], max_segments=batch["max_segments"])


def test_flat_cu_seqlens_is_one_row_of_documents():
    b = adapters.megatron_packed_to_batch([0, 3, 5, 9])
    assert b["mask"] == "causal" and b["max_segments"] == 3
    assert b["q_segment_ids"].tolist() == [[1, 1, 1, 2, 2, 3, 3, 3, 3]]
    assert b["q_segment_pos"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert meta(b).cu_seqlens_q.tolist() == [0, 3, 5, 9]


def test_padded_documents_keep_their_tokens_first_and_padding_after():
    b = adapters.megatron_packed_to_batch([0, 3, 5], [0, 4, 8])
    assert b["mask"] == "padding_causal"
    assert b["q_segment_ids"].tolist() == [[1, 1, 1, 0, 2, 2, 0, 0]]
    assert b["q_segment_pos"].tolist() == [[0, 1, 2, 0, 0, 1, 0, 0]]
    md = meta(b)
    assert md.cu_seqlens_q.tolist() == [0, 3, 5] and md.ragged_offsets_q.tolist() == [0, 4, 8]


def test_per_sample_rows_drop_the_collation_padding():
    # As GPTDataset collates them: seq_length 6, each row right-padded with copies of 6.
    cu = [[0, 2, 6, 6, 6, 6, 6], [0, 1, 4, 6, 6, 6, 6]]
    b = adapters.megatron_packed_to_batch(cu, causal=False)
    assert b["mask"] == "no_mask" and b["max_segments"] == 3
    assert b["q_segment_ids"].tolist() == [[1, 1, 2, 2, 2, 2], [1, 2, 2, 2, 3, 3]]
    assert meta(b).cu_seqlens_q.tolist() == [0, 2, 6, 7, 10, 12]


def test_a_flat_stream_splits_into_rows_of_seq_length_like_flatten_merges_them():
    per_sample = adapters.megatron_packed_to_batch([[0, 2, 6, 6], [0, 1, 4, 6]])
    flat = adapters.megatron_packed_to_batch([0, 2, 6, 7, 10, 12], seq_length=6)
    for key in ("q_segment_ids", "q_segment_pos", "mask", "max_segments"):
        assert np.array_equal(per_sample[key], flat[key]), key


@pytest.mark.parametrize("args, kwargs, match", [
    (([1, 3],), {}, "prefix sums from 0"),
    (([0, 3, 2],), {}, "never decreasing"),
    (([0, 3, 5], [0, 2, 6]), {}, "3 tokens in a padded length of 2"),
    (([0, 3, 5], [0, 4]), {}, "different documents"),
    (([0, 4, 8],), {"seq_length": 6}, "crosses the row boundary"),
])
def test_refusals_say_what_is_wrong(args, kwargs, match):
    with pytest.raises(AttnOracleError, match=match) as e:
        adapters.megatron_packed_to_batch(*args, **kwargs)
    assert e.value.code == "bad_metadata"
