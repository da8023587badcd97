"""attn_oracle.adapters: hand-computed cases of docs/conventions.md, round trips,
refusals with their codes, and a kernel written in FlashAttention's conventions
(examples/flash_convention_backend.py) that passes the attention properties
through its adapter while its planted twin (causal read top-left) fails with a
shrunk case. About 40 s, mostly the two `check` runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO

from attn_oracle import AttnOracleError, adapters, oracle


def test_flash_attention_causal_is_bottom_right():
    batch = adapters.flash_attention_to_batch([0, 2, 5], [0, 4, 7], causal=True)
    assert batch["mask"] == "causal_bottom_right" and batch["max_segments"] == 2
    assert batch["q_segment_ids"].tolist() == [[1, 1, 2, 2, 2]]
    assert batch["q_segment_pos"].tolist() == [[0, 1, 0, 1, 2]]
    assert batch["kv_segment_ids"].tolist() == [[1, 1, 1, 1, 2, 2, 2]]
    mask = oracle.explicit_mask(**{k: v for k, v in batch.items()})
    assert mask[0, 0].tolist() == [True, True, True, False, False, False, False]  # query 0 sees keys 0..2


def test_flash_attention_round_trip_and_gather_indices():
    batch = adapters.flash_attention_to_batch([0, 2, 5], [0, 4, 7], causal=True)
    call = adapters.flash_attention_from_batch(batch)
    assert call["cu_seqlens_q"].tolist() == [0, 2, 5] and call["cu_seqlens_k"].tolist() == [0, 4, 7]
    assert call["causal"] and call["window_size"] == (-1, -1)
    assert call["q_tokens"].tolist() == list(range(5)) and call["kv_tokens"].tolist() == list(range(7))


def test_a_workers_batch_goes_in_as_the_dict_does():
    """The stack modules hand their worker's Batch to the adapters directly."""
    from attn_oracle.worker import Batch

    d = adapters.flash_attention_to_batch([0, 2, 5], [0, 4, 7], causal=True, window_size=(3, 0))
    b = Batch(d["q_segment_ids"], d["q_segment_pos"], d["kv_segment_ids"], d["kv_segment_pos"], d["mask"],
              list(d["window"]), d["max_segments"])
    for convert in (adapters.flash_attention_from_batch, adapters.cudnn_from_batch):
        from_dict, from_batch = convert(d), convert(b)
        assert from_dict.keys() == from_batch.keys()
        for key, value in from_dict.items():
            assert np.array_equal(np.asarray(value), np.asarray(from_batch[key])), key

def test_flash_attention_refuses_top_left_causal_it_cannot_express():
    batch = dict(q_segment_ids=[[1, 1, 1, 1]], q_segment_pos=[[0, 1, 2, 3]], kv_segment_ids=[[1, 1]],
                 kv_segment_pos=[[0, 1]], mask="causal", max_segments=1)
    with pytest.raises(AttnOracleError) as e:
        adapters.flash_attention_from_batch(batch)
    assert e.value.code == "unsupported" and "row 0, document 1" in str(e.value)


@pytest.mark.parametrize("cu_seqlens_q, code", [([1, 2], "bad_metadata"), ([0, 3, 2], "bad_metadata"),
                                                ([0, 2**31], "bad_metadata")])
def test_flash_attention_malformed_cu_seqlens(cu_seqlens_q, code):
    with pytest.raises(AttnOracleError) as e:
        adapters.flash_attention_to_batch(cu_seqlens_q, [0] * len(cu_seqlens_q))
    assert e.value.code == code


def test_cudnn_left_bound_is_exclusive():
    batch = adapters.cudnn_to_batch([2, 2], [2, 3], [0, 12, 24], [0, 8, 20], diagonal_alignment="bottom_right",
                                    left_bound=1, right_bound=0, q_elements_per_token=4, kv_elements_per_token=4)
    assert batch["mask"] == "padding_causal_bottom_right" and tuple(batch["window"]) == (0, -1)
    assert batch["q_segment_ids"].tolist() == [[1, 1, 0, 2, 2, 0]]
    back = adapters.cudnn_from_batch(batch, q_elements_per_token=4, kv_elements_per_token=4)
    assert back["left_bound"] == 1 and back["right_bound"] == 0 and back["diagonal_alignment"] == "bottom_right"
    assert back["seq_len_q"].tolist() == [2, 2] and back["ragged_offset_q"].tolist()[:2] == [0, 12]


def test_cudnn_refuses_a_left_bound_below_one():
    with pytest.raises(AttnOracleError) as e:
        adapters.cudnn_to_batch([1], [1], [0, 1], [0, 1], left_bound=0)
    assert e.value.code == "bad_window"


def test_pytorch_is_causal_is_top_left_and_lower_right_is_bottom_right():
    assert adapters.sdpa_to_batch(2, 3, 5, causal="is_causal")["mask"] == "causal"
    lower_right = adapters.sdpa_to_batch(2, 3, 5, causal="causal_lower_right")
    assert lower_right["mask"] == "causal_bottom_right" and lower_right["q_segment_ids"].shape == (2, 3)
    assert adapters.sdpa_from_batch(lower_right) == {"batch": 2, "q_len": 3, "kv_len": 5, "causal": "causal_lower_right"}


def test_flex_document_mask_round_trip():
    batch = adapters.flex_document_mask_to_batch([[0, 0, 0, 1, 1, -1]], causal=True, sliding_window=1)
    assert batch["mask"] == "padding_causal" and tuple(batch["window"]) == (1, -1)
    assert batch["q_segment_ids"].tolist() == [[1, 1, 1, 2, 2, 0]]
    back = adapters.flex_document_mask_from_batch(batch)
    assert back["document_id"].tolist() == [[0, 0, 0, 1, 1, -1]] and back["causal"] and back["sliding_window"] == 1
    assert back["window_right"] == -1


def test_flex_document_mask_takes_both_window_sides_on_every_kind():
    # (1, 0) on a non-causal kind, and a right side alone: each a band flex's mask_mod says.
    local = adapters.flex_document_mask_to_batch([[0, 0, 0, 1, 1]], sliding_window=1, window_right=0)
    assert local["mask"] == "no_mask" and tuple(local["window"]) == (1, 0)
    mask = oracle.explicit_mask(**local)[0]
    idx = np.arange(5)
    doc = np.array([0, 0, 0, 1, 1])
    mod = (doc[:, None] == doc[None, :]) & (idx[:, None] - idx[None, :] <= 1) & (idx[None, :] - idx[:, None] <= 0)
    assert np.array_equal(mask, mod)
    back = adapters.flex_document_mask_from_batch(local)
    assert (back["causal"], back["sliding_window"], back["window_right"]) == (False, 1, 0)
    right = adapters.flex_document_mask_from_batch({**local, "window": (-1, 2)})
    assert (right["sliding_window"], right["window_right"]) == (-1, 2)
    # Bottom-right on self-attention is top-left causal; its right side is ignored.
    br = adapters.flex_document_mask_from_batch({**local, "mask": "causal_bottom_right", "window": (2, 5)})
    assert (br["causal"], br["sliding_window"], br["window_right"]) == (True, 2, -1)
    with pytest.raises(AttnOracleError) as e:
        adapters.flex_document_mask_to_batch([[0, 0]], window_right=-2)
    assert e.value.code == "bad_window"


def test_transformer_engine_thd_and_mask_names():
    assert adapters.transformer_engine_mask_kind("padding_causal_bottom_right") == "padding_causal_bottom_right"
    with pytest.raises(AttnOracleError) as e:
        adapters.transformer_engine_mask_kind("arbitrary")
    assert e.value.code == "bad_mask"
    batch = adapters.transformer_engine_thd_to_batch("padding_causal_bottom_right", [0, 1, 3], [0, 2, 4],
                                                     window_size=(1, 0), cu_seqlens_q_padded=[0, 2, 4],
                                                     cu_seqlens_kv_padded=[0, 2, 4])
    assert batch["q_segment_ids"].tolist() == [[1, 0, 2, 2]] and batch["kv_segment_ids"].tolist() == [[1, 1, 2, 2]]
    assert adapters.transformer_engine_thd_from_batch(batch)["cu_seqlens_q"].tolist() == [0, 1, 3]


def check(target, tmp_path, *extra):
    env = {**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    return subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--filter", "attention/matchesReference",
                           "--report", str(tmp_path / "report"), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.parametrize("stack", ["flash", "cudnn"])
def test_a_kernel_in_a_stacks_conventions_passes_through_its_adapter(stack, tmp_path):
    done = check(f"examples.{stack}_convention_backend:Backend", tmp_path, "--cases", "40")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report" / "conformance.json").read_text())
    assert report["results"][0]["draws"]["passed"] >= 10


# FlashAttention's causal read top-left; cuDNN's exclusive left bound read inclusive.
@pytest.mark.parametrize("stack", ["flash", "cudnn"])
def test_the_convention_misapplied_fails_with_a_shrunk_case(stack, tmp_path):
    done = check(f"examples.planted_{stack}_convention_backend:Backend", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(l for l in done.stdout.splitlines() if "counterexample" in l)
    shrunk = json.loads(Path(line.split(": ", 1)[1]).read_text())
    assert sum(len(row) for row in shrunk["q"]["segment_ids"]) <= 3, shrunk
    assert sum(len(row) for row in shrunk["kv"]["segment_ids"]) <= 3, shrunk
