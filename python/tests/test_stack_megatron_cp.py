"""attn_oracle.stacks.megatron_cp against the real Megatron-core (skipped when it does not import):
each class's permutation, rank metadata and reorder against the CP contract computed here from
its definitions (cp_contract.py), on small batches of several documents, with padding, at cp 2
to 4; and each decline shown against the library. Seconds on two cores."""

import pytest

pytest.importorskip("megatron.core", reason="Megatron-core is not installed here: scripts/stacks --only megatron_cp "
                                            "builds the torch venv with megatron-core==0.19.2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import cp_contract as cc  # noqa: E402
from attn_oracle.domain import CAUSAL_KINDS  # noqa: E402
from attn_oracle.errors import Unsupported  # noqa: E402
from attn_oracle.stacks import megatron_cp  # noqa: E402

# Documents of multiples of 2*cp (cp 2: 4), two rows.
NO_PADDING = [[1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3],
              [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
# Spans (a document with the padding after it; leading padding) of multiples of 4 and of 8.
PADDED = [[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2],
          [1, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 0, 0, 0]]


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_the_split_holds_the_head_tail_permutation_of_padded_documents(cp):
    prob = cc.problem(PADDED, mask="padding_causal")
    lay = cc.layout(cp, balance="head_tail")
    assert np.array_equal(megatron_cp.Backend().cp_permutation(lay, prob), cc.permutation(lay, prob))


@pytest.mark.parametrize("cp", [2, 4])
def test_backend_holds_the_head_tail_permutation(cp):
    ids = [[1] * 8 + [2] * 16 + [3] * 8, [1] * 16 + [2] * 8 + [3] * 8]
    prob, lay = cc.problem(ids), cc.layout(cp, balance="head_tail")
    assert np.array_equal(megatron_cp.Backend().cp_permutation(lay, prob), cc.permutation(lay, prob))


@pytest.mark.parametrize("mask", CAUSAL_KINDS)
@pytest.mark.parametrize("cp", [2, 4])
def test_the_indexer_layout_gives_each_ranks_metadata(cp, mask):
    ids = [[1] * 8 + [2] * 16 + [3] * 8, [1] * 16 + [2] * 8 + [3] * 8]
    prob, lay = cc.problem(ids, mask=mask), cc.layout(cp, balance="head_tail")
    for rank in range(cp):
        got = megatron_cp.Backend().cp_rank_metadata(lay, prob, rank, 0)
        cc.assert_metadata_equal(got, cc.rank_metadata(lay, prob, rank), f"cp {cp} rank {rank}")


@pytest.mark.parametrize("mask", ["padding_causal", "padding_causal_bottom_right"])
@pytest.mark.parametrize("cp", [2, 4])
def test_the_indexer_layout_cut_to_the_documents_gives_each_ranks_metadata_with_padding(cp, mask):
    prob, lay = cc.problem(PADDED, mask=mask), cc.layout(cp, balance="head_tail")
    for rank in range(cp):
        got = megatron_cp.Backend().cp_rank_metadata(lay, prob, rank, 0)
        cc.assert_metadata_equal(got, cc.rank_metadata(lay, prob, rank), f"cp {cp} rank {rank}")


def test_the_indexer_layout_holds_two_segments_a_document_the_back_keys_holding_the_front():
    seg = megatron_cp.indexer_layout(np.array([[1] * 8 + [2] * 8]), 2, 1)
    assert seg.segment_q_lengths.tolist() == [2, 2, 2, 2]
    assert seg.segment_k_lengths.tolist() == [4, 6, 4, 6]  # document of 8, rank 1: chunks 1 and 2 of 4
    assert seg.segment_key_starts.tolist() == [0, 0, 8, 8]


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_per_sequence_holds_the_dual_chunk_swap_permutation(cp):
    prob = {3: cc.problem([[1] * 12 + [2] * 12, [1] * 4 + [2] * 20]),
            8: cc.problem([[1] * 16 + [2] * 16, [1] * 32])}.get(cp, cc.problem(NO_PADDING))
    lay = cc.layout(cp, balance="dual_chunk_swap")
    assert np.array_equal(megatron_cp.PerSequence().cp_permutation(lay, prob), cc.permutation(lay, prob))


@pytest.mark.parametrize("cp", [2, 4])
def test_per_sequence_reorders_and_restores_by_the_mamba_layers_functions(cp):
    prob, lay = cc.problem(NO_PADDING), cc.layout(cp, balance="dual_chunk_swap")
    values = np.random.default_rng(0).uniform(size=(2, 16, 3))
    perm = cc.permutation(lay, prob)
    forward = megatron_cp.PerSequence().cp_reorder(lay, prob, values, 3, False)
    assert np.array_equal(forward, np.take_along_axis(values, perm[..., None], 1))
    assert np.array_equal(megatron_cp.PerSequence().cp_reorder(lay, prob, forward, 3, True), values)


# ---- declines and domains, shown against the library


def test_the_indexer_layout_refuses_cp_1_so_the_backend_declines_it():
    from megatron.core.transformer.experimental_attention_variant import dsa_layout

    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="cp_size > 1"):
        dsa_layout.build_packed_cp_indexer_layout(cu, cu, cp_size=1, cp_rank=0, key_size=4)
    prob, lay = cc.problem([[1, 1, 1, 1]]), cc.layout(1, balance="head_tail")
    assert "cp = 1" in megatron_cp.Backend().unsupported_context_parallel(lay, prob)
    with pytest.raises(Unsupported):
        megatron_cp.Backend().cp_rank_metadata(lay, prob, 0, 0)
    assert 1 not in megatron_cp.Backend.domain.cp_sizes


def test_dsa_context_parallelism_is_all_gather_only():
    from megatron.core.transformer.experimental_attention_variant import dsa_layout

    with pytest.raises(NotImplementedError, match="allgather only"):
        dsa_layout.get_cp_positions_from_layout(4, 8, 2, 0, "p2p", torch.device("cpu"))
    assert megatron_cp.Backend.domain.cp_strategies == ("all_gather",)


def test_the_per_document_split_needs_transformer_engine_which_is_absent_here():
    from megatron.core import utils

    if utils.tex is not None:
        pytest.skip("TransformerEngine imports here")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        cu = torch.tensor([[0, 4, 8]], dtype=torch.int32)
        batch = {"position_ids": torch.arange(8)[None], "cu_seqlens": cu, "cu_seqlens_padded": cu}
        with pytest.raises(AttributeError, match="thd_get_partitioned_indices"):
            utils.get_batch_on_this_cp_rank(batch, is_hybrid_cp=False)
    finally:
        dist.destroy_process_group()


def test_cp_attention_is_not_served_and_needs_transformer_engine():
    """Not served (the suite skips the properties that call them): the attention of both classes and
    PerSequence's rank metadata. Megatron's CP attention is TE's, which does not import here."""
    from megatron.core import utils

    for cls in (megatron_cp.Backend, megatron_cp.PerSequence):
        assert not hasattr(cls, "cp_attention") and not hasattr(cls, "cp_rank_attention"), cls.__name__
    assert not hasattr(megatron_cp.PerSequence, "cp_rank_metadata")
    assert callable(megatron_cp.Backend.cp_rank_metadata)
    if utils.tex is not None:
        pytest.skip("TransformerEngine imports here")
    with pytest.raises(ImportError):
        import transformer_engine_torch  # noqa: F401


def test_the_domains_name_what_each_class_takes():
    assert megatron_cp.Backend.domain.cp_balances == ("head_tail",)
    assert set(megatron_cp.Backend.domain.mask_kinds) == set(CAUSAL_KINDS) and not megatron_cp.Backend.domain.no_padding
    assert megatron_cp.PerSequence.domain.cp_balances == ("dual_chunk_swap",)


def test_the_planted_twin_that_keeps_the_padding_keys_is_caught():
    import planted_cp_stacks

    prob, lay = cc.problem(PADDED, mask="padding_causal"), cc.layout(2, balance="head_tail")
    with pytest.raises(AssertionError, match="kv"):
        for rank in range(2):
            cc.assert_metadata_equal(planted_cp_stacks.MegatronBackend().cp_rank_metadata(lay, prob, rank, 0),
                                     cc.rank_metadata(lay, prob, rank))


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_random_padded_batches_match_the_contract(cp):
    rng = np.random.default_rng(cp)
    for draw in range(12):
        ids = cc.random_spans_rows(rng, int(rng.integers(1, 4)), cp, spans=int(rng.integers(1, 4)))
        prob = cc.problem(ids, mask=str(rng.choice(["padding_causal", "padding_causal_bottom_right"])))
        lay = cc.layout(cp, balance="head_tail")
        assert np.array_equal(megatron_cp.Backend().cp_permutation(lay, prob), cc.permutation(lay, prob)), ids
        for rank in range(cp):
            cc.assert_metadata_equal(megatron_cp.Backend().cp_rank_metadata(lay, prob, rank, 0),
                                     cc.rank_metadata(lay, prob, rank), f"{ids} rank {rank}")


# ---- invalid layouts: Megatron's own refusals, as the contract's codes


def test_megatrons_guards_give_the_contracts_codes():
    from attn_oracle.errors import AttnOracleError

    bad_document = cc.problem([[1] * 6 + [2] * 2], mask="causal")  # a document of 6 at cp 2 (2*cp = 4)
    lay = cc.layout(2, balance="head_tail")
    with pytest.raises(AttnOracleError) as e:
        megatron_cp.Backend().validate_cp_layout(lay, bad_document)
    assert e.value.code == "cp_document_not_divisible" and "divisible by" in e.value.message
    with pytest.raises(AttnOracleError, match="cp_document_not_divisible"):
        megatron_cp.Backend().cp_rank_metadata(lay, bad_document, 0, 0)
    with pytest.raises(AttnOracleError) as e:
        megatron_cp.PerSequence().validate_cp_layout(cc.layout(2, balance="dual_chunk_swap"), cc.problem([[1] * 6]))
    assert e.value.code == "cp_not_divisible"
    assert megatron_cp.Backend().validate_cp_layout(lay, cc.problem(NO_PADDING)) is None
    # A row off cp: Megatron's guard names a sequence (it checks sequences only), mapped to the row's code.
    with pytest.raises(AttnOracleError) as e:
        megatron_cp.Backend().validate_cp_layout(lay, cc.problem([[1, 1, 1]]))
    assert e.value.code == "cp_not_divisible" and "per-sequence padded lengths" in e.value.message
    # The cp = 1 decline (the indexer layout's refusal) does not hide a layout's code: cp = 0 gets cp_bad_layout.
    assert megatron_cp.Backend().unsupported_context_parallel(cc.layout(0, balance="head_tail"), cc.problem([[1] * 4]))\
        is None
    with pytest.raises(AttnOracleError, match="cp_bad_layout"):
        megatron_cp.Backend().cp_rank_metadata(cc.layout(0, balance="head_tail"), cc.problem([[1] * 4]), 0, 0)
    # cp = 1 splits nothing: Megatron's split takes a document off 2*cp there without a word (cp <= 1 is no split).
    assert megatron_cp.Backend().validate_cp_layout(cc.layout(1, balance="head_tail"), cc.problem([[1] * 3])) is None
    with pytest.raises(AttnOracleError, match="cp_bad_layout"):
        megatron_cp.Backend().validate_cp_layout(cc.layout(0, balance="head_tail"), cc.problem(NO_PADDING))
    assert not hasattr(megatron_cp.Backend, "cp_attention")  # not served: the suite skips that property
