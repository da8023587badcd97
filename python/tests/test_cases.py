"""Case files from Python: every fixture reads, round-trips through the C++
writer unchanged, and iterates; every bad input of fixtures/bad_inputs raises
the code its manifest pins; cases built from arrays evaluate like files.
About 2 s."""

import json

import numpy as np
import pytest
from support import FIXTURES, assert_same, cli_eval, run_cli

import attn_oracle
from attn_oracle import AttnOracleError
from attn_oracle.cases import Case, from_json, iter_case_paths, iter_cases, read_case, to_json

ALL_FIXTURES = iter_case_paths(FIXTURES / "design") + iter_case_paths(FIXTURES / "regressions")
MANIFEST = json.loads((FIXTURES / "bad_inputs" / "manifest.json").read_text())


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_round_trips(path, tmp_path):
    case = read_case(path)
    assert case.op == json.loads(path.read_text())["op"] and case.path == path
    assert_same(Case.from_dict(case.to_dict()).to_dict(), case.to_dict())
    written = tmp_path / "again.case.json"
    case.write(written)
    again = read_case(written)
    assert_same(again.to_dict(), case.to_dict())
    # The writer is the CLI's: promoting a metadata case (integers: the same
    # expected) keeps the bytes Python wrote.
    if case.op == "metadata" and case.expected is not None and "error" not in case.expected:
        promoted = tmp_path / "promoted.case.json"
        assert run_cli("promote", str(written), str(promoted), "--note", case.note).returncode == 0
        assert promoted.read_text() == written.read_text()


def test_arrays_are_numpy_with_the_files_shapes():
    case = read_case(FIXTURES / "design" / "ex9_broadcast.case.json")
    ids = case.fields["q"]["segment_ids"]
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.shape == (1, 2, 4)
    assert case.expected["cu_seqlens_q"].tolist() == [0, 2, 4, 7]
    kv_buffer = read_case(FIXTURES / "design" / "kv_buffer_first_document_begin_7.case.json")
    assert kv_buffer.expected["dq"].dtype == np.float64


def test_non_finite_floats_cross_as_the_files_strings():
    lse = [[["-inf", 0.5]]]
    array = from_json(lse)
    assert array.dtype == np.float64 and np.isneginf(array[0, 0, 0])
    assert to_json(array) == lse
    assert from_json([["fsdp"], None]) == [["fsdp"], None]  # not numbers: left alone


def test_iter_cases_reads_every_fixture_sorted():
    cases = list(iter_cases(FIXTURES))
    assert [c.path for c in cases] == sorted(c.path for c in cases)
    assert {c.op for c in cases} == {"metadata", "attention", "small_seq", "kv_buffer", "sharding", "context_parallel"}
    assert len(cases) == len(iter_case_paths(FIXTURES)) >= len(ALL_FIXTURES)


@pytest.mark.parametrize("entry", [e for e in MANIFEST if e.get("backend", "reference") == "reference"],
                         ids=lambda e: e.get("name", e["file"]))
def test_bad_inputs_raise_the_manifests_code(entry):
    path = FIXTURES / "bad_inputs" / entry["file"]
    args = entry.get("args", [])
    budget_before = attn_oracle.oracle.memory_budget()
    if args:
        assert args[0] == "--memory-budget"
        attn_oracle.oracle.set_memory_budget({"K": 1 << 10, "M": 1 << 20}[args[1][-1]] * int(args[1][:-1]))
    try:
        with pytest.raises(AttnOracleError) as raised:
            attn_oracle.eval_case(path)
    finally:
        attn_oracle.oracle.set_memory_budget(budget_before)
    assert raised.value.code == entry["code"]
    assert entry["mentions"] in raised.value.message
    status, printed = cli_eval(path, *args)
    assert status == 2 and printed["error"]["code"] == entry["code"]


def test_cases_from_arrays_evaluate_like_files(tmp_path):
    case = attn_oracle.metadata_case([[1, 1, 1, 2, 2, 0, 0, 0]], [[0, 1, 2, 0, 1, 0, 0, 0]],
                                     mask="padding_causal", max_segments=3, note="worked example 1")
    case.write(tmp_path / "ex1.case.json")
    status, printed = cli_eval(tmp_path / "ex1.case.json")
    assert status == 0
    assert_same(case.eval(), from_json(printed))
    assert_same(case.eval(), read_case(FIXTURES / "design" / "ex1.case.json").eval())

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 3, 2, 4)).astype(np.float16) for _ in range(3))
    batch = dict(q_segment_ids=[[1, 1, 2]], q_segment_pos=[[0, 1, 0]], mask="causal", max_segments=2)
    case = attn_oracle.attention_case(q, k, v, **batch)
    assert case.fields["dtype"] == "fp16" and case.fields["tensors"]["q"].shape == (1, 3, 2, 4)
    assert_same(case.eval(), attn_oracle.attention(q, k, v, **batch).as_dict())


def test_invalid_cases_are_refused_before_writing(tmp_path):
    data = read_case(FIXTURES / "design" / "ex1.case.json").to_dict()
    data["mask"] = "sideways"
    with pytest.raises(AttnOracleError) as raised:
        Case.from_dict(data)
    assert raised.value.code == "bad_mask"
    data["mask"], data["colour"] = "padding", "blue"
    with pytest.raises(AttnOracleError, match="colour: unknown field"):
        Case.from_dict(data)
