"""attn_oracle.adapters' transformers section: packed position_ids by both of
transformers' rules, our batch back to position_ids (exact or refused), the 2D
attention mask; and the count of where the two rules disagree on drawn batches,
checked against transformers' own code where it imports. About 1 s without
transformers."""

import numpy as np
import pytest

from attn_oracle import AttnOracleError, adapters, oracle
from transformers_packing_rules import count


def test_the_two_rules_disagree_on_a_gap_and_agree_from_zero():
    gap = [[0, 1, 2, 5, 6]]
    assert adapters.transformers_position_ids_to_batch(gap, rule="flash")["q_segment_ids"].tolist() == [[1, 1, 1, 1, 1]]
    sdpa = adapters.transformers_position_ids_to_batch(gap, rule="sdpa")
    assert sdpa["q_segment_ids"].tolist() == [[1, 1, 1, 2, 2]]
    assert sdpa["q_segment_pos"].tolist() == [[0, 1, 2, 0, 1]]
    from_zero = [[0, 1, 2, 0, 0, 1]]
    for rule in ("flash", "sdpa"):
        b = adapters.transformers_position_ids_to_batch(from_zero, rule=rule)
        assert b["q_segment_ids"].tolist() == [[1, 1, 1, 2, 3, 3]] and b["max_segments"] == 3
        assert b["mask"] == "causal" and b["window"] == (-1, -1)
        oracle.metadata(**b)  # a valid batch


def test_the_flash_rule_packs_one_row_only_and_drops_tokens_before_the_minimum():
    rows = [[0, 1, 0, 1], [0, 0, 1, 2]]
    flash = adapters.transformers_position_ids_to_batch(rows, rule="flash")
    assert flash["q_segment_ids"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]  # no packing for B > 1
    assert adapters.transformers_position_ids_to_batch(rows, rule="sdpa")["q_segment_ids"].tolist() == [
        [1, 1, 2, 2], [1, 2, 2, 2]]
    # cu_seqlens start at the first minimum: the tokens before it are in no sequence.
    late = adapters.transformers_position_ids_to_batch([[3, 0, 1]], rule="flash")
    assert late["q_segment_ids"].tolist() == [[0, 1, 1]] and late["mask"] == "padding_causal"


def test_a_sliding_window_of_w_tokens_is_our_left_side_w_minus_one():
    b = adapters.transformers_position_ids_to_batch([[0, 1, 2, 3]], sliding_window=2)
    assert b["window"] == (1, -1)
    mask = oracle.explicit_mask(**b)
    assert np.asarray(mask).reshape(4, 4)[3].tolist() == [False, False, True, True]  # kv_idx > q_idx - 2
    assert adapters.transformers_position_ids_to_batch([[0, 1]], causal=False, sliding_window=3)["window"] == (2, 2)
    with pytest.raises(AttnOracleError) as e:
        adapters.transformers_position_ids_to_batch([[0, 1]], sliding_window=0)
    assert e.value.code == "bad_window"


def test_our_batch_goes_back_to_position_ids_or_is_refused():
    b = adapters.transformers_position_ids_to_batch([[0, 1, 2, 0, 1]], sliding_window=3)
    back = adapters.transformers_position_ids_from_batch(b, rule="sdpa")
    assert back["position_ids"].tolist() == [[0, 1, 2, 0, 1]] and back["sliding_window"] == 3 and back["causal"]
    two_rows = adapters.transformers_position_ids_to_batch([[0, 1, 0], [0, 0, 1]])
    assert adapters.transformers_position_ids_from_batch(two_rows, rule="sdpa")["position_ids"].shape == (2, 3)
    with pytest.raises(AttnOracleError, match="row 0, token 2: a document starts here") as e:
        adapters.transformers_position_ids_from_batch(two_rows, rule="flash")  # B > 1: one sequence a row
    assert e.value.code == "unsupported"
    offset = {**b, "q_segment_pos": np.array([[3, 4, 5, 0, 1]]), "kv_segment_pos": np.array([[3, 4, 5, 0, 1]])}
    with pytest.raises(AttnOracleError, match="counts positions from 0"):
        adapters.transformers_position_ids_from_batch(offset, rule="sdpa")
    for change, why in (({"mask": "padding_causal"}, "packed rows are causal"), ({"mask": "no_mask", "window": (1, 0)}, "window"),
                        ({"kv_segment_ids": np.array([[1, 1, 1, 2, 3]])}, "self-attention")):
        with pytest.raises(AttnOracleError, match=why):
            adapters.transformers_position_ids_from_batch({**b, **change})


def test_a_left_padded_attention_mask_is_one_document_after_its_padding():
    b = adapters.transformers_attention_mask_to_batch([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert b["q_segment_ids"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert b["q_segment_pos"].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert b["mask"] == "padding_causal"
    oracle.metadata(**b)
    with pytest.raises(AttnOracleError, match="joins them into one sequence") as e:
        adapters.transformers_attention_mask_to_batch([[1, 0, 1]])
    assert e.value.code == "unsupported"


def test_the_rules_disagree_only_off_the_collators_positions_and_for_many_rows():
    table, mismatches = count(300, 1, with_transformers=False)
    assert table["from zero, B = 1"]["rules disagree"] == 0
    assert table["from zero, B > 1"]["rules disagree"] > 0  # flash does not pack B > 1
    assert table["offset or gapped, B = 1"]["rules disagree"] > 0
    assert table["from zero, B = 1"]["sdpa differs from drawn"] == 0
    assert mismatches == []


def test_the_adapter_reads_transformers_own_documents():
    pytest.importorskip("torch", reason="transformers' packing code needs torch (scripts/stacks makes a venv with it)")
    pytest.importorskip("transformers", reason="transformers is not installed (scripts/stacks makes a venv with it)")
    _, mismatches = count(200, 2, with_transformers=True)
    assert mismatches == [], mismatches[:3]
