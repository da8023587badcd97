"""attn_oracle.packing: the batch helpers agree with the reference on every field
(the spans they read back rebuild its metadata), broadcast extra dims, and raise
the reference's error for an invalid batch."""

import doctest

import numpy as np
import pytest

import attn_oracle
from attn_oracle import packing

BATCHES = [
    dict(q_segment_ids=[[1, 1, 2, 2, 0], [3, 3, 3, 0, 0]], q_segment_pos=[[0, 1, 0, 1, 0], [0, 1, 2, 0, 0]],
         mask="padding_causal", max_segments=3),
    dict(q_segment_ids=[[1, 1, 2]], q_segment_pos=[[0, 1, 0]], kv_segment_ids=[[1, 1, 1, 2, 2]],
         kv_segment_pos=[[0, 1, 2, 0, 1]], mask="causal_bottom_right", max_segments=2),
    dict(q_segment_ids=[[[1, 1, 0]], [[1, 2, 2]]], q_segment_pos=[[0, 1, 2]], mask="padding", max_segments=2),
    dict(q_segment_ids=[[1, 1, 1, 1]], q_segment_pos=[[0, 1, 2, 3]], kv_segment_ids=[[1, 1]], kv_segment_pos=[[0, 1]],
         mask="causal", max_segments=1),  # top-left causal, more queries than keys
]


@pytest.mark.parametrize("batch", BATCHES)
def test_spans_rebuild_the_reference_metadata(batch):
    want = packing.check(batch).as_dict()
    got = packing.metadata_from_documents(batch, packing.documents(batch))
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    q_valid, kv_valid = packing.valid_tokens(batch)
    assert got["indices_q"].tolist() == np.flatnonzero(q_valid).tolist()
    assert got["indices_kv"].tolist() == np.flatnonzero(kv_valid).tolist()
    assert got["max_seqlen_q"] == max(np.diff(want["cu_seqlens_q"]), default=0)


def test_rows_broadcast_positions_over_extra_dims():
    r = packing.rows(BATCHES[2])
    assert r.extra == (2,) and r.batch_size == 1
    assert r.q_ids.tolist() == [[1, 1, 0], [1, 2, 2]] and r.q_pos.tolist() == [[0, 1, 2], [0, 1, 2]]
    empty = packing.rows(dict(q_segment_ids=np.zeros((2, 1, 0), np.int64), q_segment_pos=np.zeros((1, 0), np.int64),
                              mask="no_mask", max_segments=1))  # T = 0: [R, 0], not a reshape error
    assert empty.q_ids.shape == (2, 0) and empty.kv_pos.shape == (2, 0)


def test_an_invalid_batch_raises_the_reference_error():
    bad = dict(BATCHES[0], q_segment_pos=[[0, 0, 0, 1, 0], [0, 1, 2, 0, 0]])  # equal positions in a document
    with pytest.raises(attn_oracle.AttnOracleError) as e:
        packing.documents(bad)
    assert e.value.code == "positions_not_increasing"


def test_a_span_outside_the_batch_is_a_value_error():
    with pytest.raises(ValueError, match="does not fit"):
        packing.metadata_from_documents(BATCHES[0], [packing.Document(row=5, segment=1, q_start=0, q_len=1,
                                                                      kv_start=0, kv_len=1)])


def test_doctests():
    assert doctest.testmod(packing).failed == 0


@pytest.mark.parametrize("batch", BATCHES)
def test_a_stacks_flat_spans_rebuild_the_reference_metadata(batch):
    # What a stack gives: each side's (flat start, length) on its [R * T] token axis, cu_seqlens order.
    want = packing.check(batch).as_dict()
    r = packing.rows(batch)
    docs = packing.documents(batch)
    q_spans = [(d.row * r.q_ids.shape[1] + d.q_start, d.q_len) for d in docs]
    kv_spans = [(d.row * r.kv_ids.shape[1] + d.kv_start, d.kv_len) for d in docs]
    got = packing.metadata_from_spans(batch, q_spans, kv_spans)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert got["indices_q"].tolist() == packing.span_tokens(*zip(*q_spans)).tolist()


def test_spans_from_cu_seqlens_and_back():
    assert packing.spans_from_cu_seqlens([0, 2, 2, 5]) == [(0, 2), (2, 0), (2, 3)]
    assert packing.spans_from_cu_seqlens([0, 2, 5], starts=[1, 4]) == [(1, 2), (4, 3)]
    assert packing.cu_seqlens([2, 0, 3]).tolist() == [0, 2, 2, 5] and packing.cu_seqlens([]).tolist() == [0]
    assert packing.span_tokens([1, 4], [2, 0]).tolist() == [1, 2] and packing.span_tokens([], []).dtype == np.int64


def test_a_wrong_span_is_a_wrong_field_and_one_past_the_rows_a_value_error():
    batch = BATCHES[0]  # rows [1, 1, 2, 2, 0] and [3, 3, 3, 0, 0] (T = 5), M = 3
    merged = packing.metadata_from_spans(batch, [(0, 4), (5, 3)])  # the stack joined row 0's two documents
    assert merged["q_seqlens"].tolist() == [[4, 0, 0], [0, 0, 3]] and merged["cu_seqlens_q"].tolist() == [0, 4, 7]
    on_padding = packing.metadata_from_spans(batch, [(0, 2), (2, 2), (4, 1), (5, 3)])  # a sequence on padding
    assert on_padding["q_seqlens"].tolist() == [[2, 2, 0], [0, 0, 3]] and on_padding["q_offsets"][0].tolist() == [0, 2, 4, -1]
    with pytest.raises(ValueError, match="does not fit"):
        packing.metadata_from_spans(batch, [(10, 1)])


def test_positions_count_from_each_documents_start():
    starts = np.array([[True, False, False, True, False], [False, False, True, False, True]])
    assert packing.positions_from_starts(starts).tolist() == [[0, 1, 2, 0, 1], [0, 1, 0, 1, 0]]
