"""attn_oracle.kv_buffer_metadata and kv_buffer_stream: the float64 oracle of
the shared K/V buffer (docs/python.md, "The K/V buffer") against `attn-oracle
eval` on the design fixture, against docs/semantics.md#3-metadata's worked example by hand,
and against whole-sequence per-document causal attention. Under 1 s."""

import json

import numpy as np
import pytest
from support import FIXTURES, cli_eval

import attn_oracle
from attn_oracle import AttnOracleError

FIXTURE = FIXTURES / "design" / "kv_buffer_first_document_begin_7.case.json"


def test_metadata_equals_the_cli_on_the_design_fixture():
    case = json.loads(FIXTURE.read_text())
    status, printed = cli_eval(FIXTURE)
    assert status == 0
    got = attn_oracle.kv_buffer_metadata(case["doc_lengths"], case["micro_seq_tokens"])
    want = printed["micro_sequences"]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in g.as_dict().items()} == w


def test_metadata_of_the_worked_example_by_hand():
    # Documents [4, 1, 10] in micro-sequences of 4 (docs/semantics.md#3-metadata).
    ms = attn_oracle.kv_buffer_metadata([4, 1, 10], 4)
    assert [(m.begin, m.end, m.first_document_begin) for m in ms] == [(0, 4, 0), (4, 8, 4), (8, 12, 5), (12, 15, 5)]
    assert [m.cu_seqlens_k.tolist() for m in ms] == [[0, 4], [0, 1, 4], [0, 7], [0, 10]]
    assert [m.cu_seqlens_q.tolist() for m in ms] == [[0, 4], [0, 1, 4], [0, 4], [0, 3]]
    assert ms[2].q_position.tolist() == [3, 4, 5, 6]  # the third document began in micro-sequence 1
    assert ms[1].q_document.tolist() == [1, 2, 2, 2] and ms[3].kv_position.tolist() == list(range(10))


def whole_sequence(doc_lengths, q, k, v, do):
    ids = np.concatenate([np.full(n, d + 1) for d, n in enumerate(doc_lengths)])[None]
    pos = np.concatenate([np.arange(n) for n in doc_lengths])[None]
    return attn_oracle.attention(q[None], k[None], v[None], do=do[None], q_segment_ids=ids, q_segment_pos=pos,
                                 mask="causal", max_segments=len(doc_lengths))


@pytest.mark.parametrize("doc_lengths, m, heads_q, heads_kv", [([4, 1, 10], 4, 2, 1), ([3, 5, 2, 7], 5, 2, 2), ([1, 1], 1, 1, 1)])
def test_stream_equals_whole_sequence_attention(doc_lengths, m, heads_q, heads_kv):
    rng = np.random.default_rng(7)
    n, d = sum(doc_lengths), 8
    q, do = (rng.standard_normal((n, heads_q, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((n, heads_kv, d)).astype(np.float32) for _ in range(2))
    got = attn_oracle.kv_buffer_stream(q, k, v, doc_lengths=doc_lengths, micro_seq_tokens=m, do=do)
    want = whole_sequence(doc_lengths, q, k, v, do)
    assert got.o.shape == (n, heads_q, d) and got.lse.shape == (heads_q, n) and got.dk.shape == (n, heads_kv, d)
    for name in ("o", "lse", "dq", "dk", "dv"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name)[0], rtol=1e-12, atol=1e-12, err_msg=name)


def test_stream_without_do_is_forward_only():
    x = np.ones((3, 1, 4), np.float32)
    r = attn_oracle.kv_buffer_stream(x, x, x, doc_lengths=[2, 1], micro_seq_tokens=2)
    assert r.dq is None and r.o.shape == (3, 1, 4)


@pytest.mark.parametrize("call, code", [
    (lambda: attn_oracle.kv_buffer_metadata([], 2), "kv_buffer_document_length"),
    (lambda: attn_oracle.kv_buffer_metadata([3, 0], 2), "kv_buffer_document_length"),
    (lambda: attn_oracle.kv_buffer_metadata([3], 0), "kv_buffer_micro_seq_tokens"),
    (lambda: attn_oracle.kv_buffer_stream(np.ones((4, 1, 4)), np.ones((3, 1, 4)), np.ones((3, 1, 4)),
                                          doc_lengths=[3], micro_seq_tokens=2), "bad_tensor_shape"),
    (lambda: attn_oracle.kv_buffer_stream(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)),
                                          doc_lengths=[3], micro_seq_tokens=2), "bad_tensor_shape"),
])
def test_bad_problems_raise_their_codes(call, code):
    with pytest.raises(AttnOracleError) as e:
        call()
    assert e.value.code == code
