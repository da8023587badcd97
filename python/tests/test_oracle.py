"""The oracle on NumPy arrays gives what `attn-oracle eval` prints, exactly:
on the worked examples of fixtures/design (metadata, errors, K/V buffer,
sharding) and on the attention and small-seq regression fixtures; errors carry
their stable codes. About 2 s."""

import json

import numpy as np
import pytest
from support import FIXTURES, assert_same, cli_eval

import attn_oracle
from attn_oracle import AttnOracleError, adapters
from attn_oracle.cases import from_json, read_case

WORKED_EXAMPLES = sorted((FIXTURES / "design").glob("*.case.json"))
REGRESSIONS = sorted((FIXTURES / "regressions").glob("*.case.json"))


def op_of(path):
    return json.loads(path.read_text())["op"]


def fixtures_of(op, paths):
    return [p for p in paths if op_of(p) == op]


def batch_keywords(case):
    f = case.fields
    return dict(q_segment_ids=f["q"]["segment_ids"], q_segment_pos=f["q"]["segment_pos"],
                kv_segment_ids=f["kv"]["segment_ids"], kv_segment_pos=f["kv"]["segment_pos"],
                mask=f["mask"], max_segments=f["max_segments"], window=tuple(int(x) for x in f["window"]))


def tensor_keywords(case):
    inputs = case.inputs()
    f = case.fields
    return dict(inputs, do=inputs.get("do"), dtype=f["dtype"], scale=f.get("scale"), **batch_keywords(case))


def expect_same_as_cli(path, compute):
    """compute() equals the CLI's eval of `path`, or raises the CLI's error."""
    status, printed = cli_eval(path)
    if status == 2:
        with pytest.raises(AttnOracleError) as raised:
            compute()
        assert raised.value.code == printed["error"]["code"]
        assert raised.value.message == printed["error"]["message"]
    else:
        assert status == 0
        assert_same(compute(), from_json(printed))


@pytest.mark.parametrize("path", WORKED_EXAMPLES, ids=lambda p: p.name)
def test_eval_of_every_design_fixture_equals_the_cli(path):
    expect_same_as_cli(path, lambda: attn_oracle.eval_case(path))


@pytest.mark.parametrize("path", fixtures_of("metadata", WORKED_EXAMPLES), ids=lambda p: p.name)
def test_metadata_on_arrays_equals_the_cli(path):
    case = read_case(path)
    expect_same_as_cli(path, lambda: attn_oracle.metadata(**batch_keywords(case)).as_dict())


@pytest.mark.parametrize("path", fixtures_of("attention", REGRESSIONS), ids=lambda p: p.name)
def test_attention_on_arrays_equals_the_cli(path):
    case = read_case(path)
    expect_same_as_cli(path, lambda: attn_oracle.attention(**tensor_keywords(case)).as_dict())


@pytest.mark.parametrize("path", fixtures_of("small_seq", REGRESSIONS), ids=lambda p: p.name)
def test_small_seq_on_arrays_equals_the_cli(path):
    case = read_case(path)
    expect_same_as_cli(path, lambda: attn_oracle.small_seq(**tensor_keywords(case)).as_dict())


@pytest.mark.parametrize("path", fixtures_of("attention", REGRESSIONS), ids=lambda p: p.name)
def test_per_document_agrees_with_dense_on_representable_inputs(path):
    case = read_case(path)
    representable, why = attn_oracle.representability(**batch_keywords(case))
    if not representable:
        assert why, "a non-representable batch names the first pair that differs"
        pytest.skip(why)
    dense = attn_oracle.attention(**tensor_keywords(case)).as_dict()
    per_document = attn_oracle.attention(**tensor_keywords(case), method="per_document").as_dict()
    assert dense.keys() == per_document.keys()
    for name in dense:
        np.testing.assert_allclose(per_document[name], dense[name], rtol=1e-12, atol=1e-12, err_msg=name)


def test_explicit_mask_anchors_bottom_right_per_document():
    # Worked example 8: 4 queries, 2 keys; the diagonal is j <= i + (Lkv - Lq).
    allowed = attn_oracle.explicit_mask([[1, 1, 1, 1]], [[0, 1, 2, 3]], [[1, 1]], [[0, 1]],
                                        mask="causal_bottom_right", max_segments=1)
    assert allowed.dtype == np.bool_
    assert allowed.tolist() == [[[False, False], [False, False], [True, False], [True, True]]]


def test_explicit_mask_applies_the_window_on_positions():
    ids, pos = [[1, 1, 1, 1]], [[0, 1, 2, 3]]
    windowed = attn_oracle.explicit_mask(ids, pos, mask="causal", max_segments=1, window=(1, 0))
    assert windowed[0].astype(int).tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    unwindowed = attn_oracle.explicit_mask(ids, pos, mask="causal", max_segments=1, window=(1, 0), with_window=False)
    assert unwindowed[0].astype(int).tolist() == np.tril(np.ones((4, 4), int)).tolist()


def test_metadata_of_worked_example_1_and_extra_dims():
    md = attn_oracle.metadata([[1, 1, 1, 2, 2, 0, 0, 0]], [[0, 1, 2, 0, 1, 0, 0, 0]],
                              mask="padding_causal", max_segments=3)
    assert md.q_seqlens.tolist() == [[3, 2, 0]] and md.kv_offsets.tolist() == [[0, 3, -1, -1]]
    assert md.cu_seqlens_q.tolist() == [0, 3, 5] and md.q_seqlens.dtype == np.int64
    # Worked example 9: q ids [1, 2, T] against kv ids [2, T]: every output carries the extra dim.
    q_ids, q_pos = np.array([[[1, 1, 2, 2], [1, 1, 1, 0]]]), np.array([[0, 1, 0, 1], [0, 1, 2, 0]])
    kv_ids, kv_pos = np.array([[1, 2, 2, 2], [1, 1, 0, 0]]), np.array([[0, 0, 1, 2], [0, 1, 0, 0]])
    md = attn_oracle.metadata(q_ids, q_pos, kv_ids, kv_pos, mask="padding_causal", max_segments=2)
    assert md.q_seqlens.tolist() == [[[2, 2], [3, 0]]] and md.kv_offsets.shape == (1, 2, 3)
    assert md.cu_seqlens_q.tolist() == [0, 2, 4, 7]


def test_attention_zeroes_queries_that_attend_nothing():
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 4, 2, 8)) for _ in range(4))
    r = attn_oracle.attention(q, k, v, do=do, q_segment_ids=[[1, 1, 0, 0]], q_segment_pos=[[0, 1, 0, 0]],
                              mask="padding_causal", max_segments=1)
    assert r.o.shape == (1, 4, 2, 8) and r.lse.shape == (1, 2, 4) and r.dk.shape == (1, 4, 2, 8)
    assert np.all(r.o[0, 2:] == 0) and np.all(np.isneginf(r.lse[0, :, 2:])) and np.all(r.dq[0, 2:] == 0)
    assert np.all(r.dk[0, 2:] == 0) and np.all(np.isfinite(r.lse[0, :, :2]))


@pytest.mark.parametrize("call, code, mentions", [
    (lambda: attn_oracle.metadata([[1, 2, 3], [1, 1, 0]], [[0, 0, 0], [0, 1, 0]], mask="padding", max_segments=2),
     "too_many_segments", "row 0"),
    (lambda: attn_oracle.metadata([[1, 1, 0, 1]], [[0, 1, 0, 2]], mask="padding", max_segments=2),
     "noncontiguous_segment", ""),
    (lambda: attn_oracle.metadata(np.ones((3, 2, 4), int), np.zeros((2, 4), int), np.ones((2, 2, 4), int),
                                  np.zeros((2, 4), int), mask="no_mask", max_segments=1),
     "extra_dims_mismatch", ""),
    (lambda: attn_oracle.metadata([[1, 1]], [[1, 1]], mask="causal", max_segments=1), "positions_not_increasing", ""),
    (lambda: attn_oracle.metadata([[1]], [[0]], mask="top_left", max_segments=1), "bad_mask", "top_left"),
    (lambda: attn_oracle.metadata([[1]], [[0]], mask="causal", max_segments=1, window=(1,)), "bad_window", ""),
    (lambda: attn_oracle.metadata([[1]], [[0]], mask="causal", max_segments=0), "bad_max_segments", ""),
    (lambda: attn_oracle.metadata([[1.5]], [[0]], mask="causal", max_segments=1), "bad_case", "float64"),
    (lambda: attn_oracle.attention(np.ones((1, 2, 3, 4)), np.ones((1, 2, 2, 4)), np.ones((1, 2, 2, 4)),
                                   q_segment_ids=[[1, 1]], q_segment_pos=[[0, 1]], mask="causal", max_segments=1),
     "bad_heads", ""),
    (lambda: attn_oracle.attention(np.ones((1, 2, 1, 4)), np.ones((1, 3, 1, 4)), np.ones((1, 2, 1, 4)),
                                   q_segment_ids=[[1, 1]], q_segment_pos=[[0, 1]], mask="causal", max_segments=1),
     "bad_tensor_shape", "k: shape [1, 3, 1, 4], expected [1, 2, 1, 4]"),
    (lambda: attn_oracle.attention(np.full((1, 2, 1, 4), 70000.0), np.ones((1, 2, 1, 4)), np.ones((1, 2, 1, 4)),
                                   q_segment_ids=[[1, 1]], q_segment_pos=[[0, 1]], mask="causal", max_segments=1,
                                   dtype="fp16"),
     "non_finite_input", "70000 is inf in fp16"),
])
def test_bad_inputs_raise_their_codes(call, code, mentions):
    with pytest.raises(AttnOracleError) as raised:
        call()
    assert raised.value.code == code
    assert mentions in raised.value.message


# Python ints past int64 get the case reader's code and message, not nanobind's
# "incompatible function arguments".
@pytest.mark.parametrize("call, code, mentions", [
    (lambda: attn_oracle.metadata([[1]], [[0]], mask="causal", max_segments=2**63),
     "bad_case", "max_segments: expected an integer in int64 range, found 9223372036854775808"),
    (lambda: attn_oracle.metadata([[1]], [[0]], mask="causal", max_segments=1, window=(2**70, 0)),
     "bad_window", f"window[0]: expected an integer in int64 range, found {2**70}"),
    (lambda: attn_oracle.explicit_mask([[1]], [[0]], mask="causal", max_segments=1, window=(0, -2**63 - 1)),
     "bad_window", f"window[1]: expected an integer in int64 range, found {-2**63 - 1}"),
    (lambda: attn_oracle.metadata([[1, 1]], [[0, 2**64]], mask="causal", max_segments=1),
     "bad_case", "q_segment_pos: 18446744073709551616 does not fit in int64"),
    (lambda: attn_oracle.oracle.set_memory_budget(2**64), "bad_case", "num_bytes: expected an integer in int64 range"),
    (lambda: adapters.sdpa_to_batch(1, 2**63, 2), "bad_case", "q_len: expected an integer in int64 range"),
    (lambda: adapters.flash_attention_to_batch([0, 2], [0, 2], window_size=(2**63, -1)),
     "bad_window", "window_size[0]: expected an integer in int64 range"),
    (lambda: adapters.flash_attention_to_batch([0, 2**63], [0, 2]),
     "bad_case", "cu_seqlens_q: 9223372036854775808 does not fit in int64"),
    (lambda: adapters.cudnn_to_batch([2], [2], [0], [0], left_bound=2**64),
     "bad_case", "left_bound: expected an integer in int64 range"),
    (lambda: adapters.flex_document_mask_to_batch([[0, 0]], sliding_window=-2**64),
     "bad_case", "sliding_window: expected an integer in int64 range"),
])
def test_integers_past_int64_raise_their_codes(call, code, mentions):
    with pytest.raises(AttnOracleError) as raised:
        call()
    assert raised.value.code == code
    assert mentions in raised.value.message


def test_memory_budget_refuses_large_masks_before_allocating():
    before = attn_oracle.oracle.memory_budget()
    attn_oracle.oracle.set_memory_budget(1 << 16)
    try:
        with pytest.raises(AttnOracleError) as raised:
            attn_oracle.explicit_mask(np.ones((1, 1000), int), np.arange(1000)[None], mask="causal", max_segments=1)
        assert raised.value.code == "over_memory_budget"
    finally:
        attn_oracle.oracle.set_memory_budget(before)
