"""attn_oracle.stacks.maxtext_cp against the installed maxtext (skipped without it): each class's
permutation (and, where MaxText has both directions, its reorder) equals the context-parallel
contract's, computed here from its definitions; each class a domain excludes is tried against
MaxText; its docstring's dual-chunk-swap example is shown not to be what its code does; a planted
twin that restores K/V with the forward reorder is caught.

These tests call the methods directly; ``python -m attn_oracle check`` drives the classes through
the worker (scripts/stacks)."""
import importlib.util
from types import SimpleNamespace as NS

import numpy as np
import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only maxtext_cp builds the venv)")
if importlib.util.find_spec("maxtext") is None:
    pytest.skip("maxtext is not installed (scripts/stacks --only maxtext_cp builds the venv)", allow_module_level=True)

from attn_oracle.stacks import maxtext_cp  # noqa: E402
from attn_oracle.errors import AttnOracleError  # noqa: E402
import cp_contract  # noqa: E402


def layout(cp, strategy, balance, stripe=1):
    return NS(cp=cp, strategy=strategy, balance=balance, stripe=stripe, indices=None)


def problem(rows, t):
    ids = np.ones((rows, t), np.int64)
    pos = np.broadcast_to(np.arange(t), (rows, t))
    batch = NS(q_segment_ids=ids, q_segment_pos=pos, kv_segment_ids=ids, kv_segment_pos=pos, mask="causal",
               window=(-1, -1), max_segments=1)
    return NS(batch=batch, heads_q=1, heads_kv=1, head_dim=8, scale=None, dtype="fp32", backward=False)


def expected_permutation(lay, t):
    """model/context_parallel.hpp's permutation of a row of t tokens (cp_contract.py's ranks): every
    rank's tokens, rank-major, each rank in row order."""
    return np.argsort(cp_contract.token_rank(lay, np.ones(t, np.int64)), kind="stable")


CLASSES = [
    (maxtext_cp.DualChunkSwap, "dual_chunk_swap", (2, 4, 8)),
    (maxtext_cp.MaskDualChunkSwap, "dual_chunk_swap", (2, 4, 8)),
    (maxtext_cp.GpuDualChunkSwap, "dual_chunk_swap", (2, 4, 8)),
    (maxtext_cp.GpuStriped, "striped", (2, 3, 4, 8)),
]


@pytest.mark.parametrize("cls, balance, sizes", CLASSES, ids=[c[0].__name__ for c in CLASSES])
def test_the_permutation_is_the_contracts(cls, balance, sizes):
    backend = cls()
    assert cls.domain.cp_balances == (balance,) and cls.domain.cp_sizes == sizes
    for cp in sizes:
        for strategy in ("all_gather", "ring"):
            for t in (2 * cp * 3, 2 * cp * 5):
                lay, p = layout(cp, strategy, balance), problem(2, t)
                assert backend.unsupported_context_parallel(lay, p) is None
                got = backend.cp_permutation(lay, p)
                assert got.tolist() == np.stack([expected_permutation(lay, t)] * 2).tolist(), (cp, t)


def test_the_reorder_and_its_inverse_are_the_contracts():
    backend = maxtext_cp.DualChunkSwap()
    rng = np.random.default_rng(20261128)
    for cp in (2, 4, 8):
        lay, p = layout(cp, "ring", "dual_chunk_swap"), problem(2, 4 * cp)
        values = rng.normal(size=(2, 4 * cp, 3))
        want = np.take_along_axis(values, np.stack([expected_permutation(lay, 4 * cp)] * 2)[:, :, None], axis=1)
        there = backend.cp_reorder(lay, p, values, 3, False)
        assert np.array_equal(there, want)
        assert np.array_equal(backend.cp_reorder(lay, p, there, 3, True), values)


def test_a_row_that_does_not_split_is_cp_not_divisible():
    for cls in (maxtext_cp.DualChunkSwap, maxtext_cp.GpuStriped):
        balance = cls.domain.cp_balances[0]
        with pytest.raises(AttnOracleError) as e:  # 12 tokens: not 2*4 chunks, not 8 stripes
            cls().cp_permutation(layout(8 if balance == "striped" else 4, "ring", balance), problem(1, 12))
        assert e.value.code == "cp_not_divisible"


def test_maxtext_refuses_what_the_domains_exclude():
    from maxtext.common.common_types import ReorderStrategy
    from maxtext.utils import max_utils

    import jax.numpy as jnp

    with pytest.raises(ValueError, match="must be a multiple of 2"):  # an odd cp, CPU/TPU path
        max_utils.reorder_sequence(jnp.arange(12)[None], 3)
    with pytest.raises(ValueError, match="must be a multiple of 2"):  # an odd cp, the Splash masks' order
        max_utils.reorder_mask_load_balancing(np.arange(12), 3, 0)
    with pytest.raises(ValueError, match="must be a multiple of 2"):  # an odd cp, GPU path (TE's reorder)
        maxtext_cp.GpuDualChunkSwap()._forward(layout(3, "ring", "dual_chunk_swap"), np.arange(12)[None])
    with pytest.raises(ValueError, match="only supported on GPU"):  # striped off the GPU path
        max_utils.reorder_causal_load_balanced({"inputs": jnp.arange(8)[None]}, 2, ReorderStrategy.STRIPED, "cpu")
    assert "multiple of 2" in maxtext_cp.DualChunkSwap().unsupported_context_parallel(
        layout(3, "ring", "dual_chunk_swap"), problem(1, 12))
    assert "stripe" in maxtext_cp.GpuStriped().unsupported_context_parallel(layout(2, "ring", "striped", 2),
                                                                              problem(1, 8))


def test_maxtext_has_no_rank_metadata_of_its_own():
    """Not served: the classes define no rank metadata or attention (the suite skips those properties)."""
    from maxtext.utils import max_utils

    for cls, _, _ in CLASSES:
        for op in ("cp_rank_metadata", "cp_rank_attention", "cp_attention"):
            assert not hasattr(cls, op), (cls.__name__, op)
    # what MaxText offers for CP is the reorder alone: no function of max_utils builds per-rank seqlens
    assert not [n for n in dir(max_utils) if "seqlen" in n.lower() or "cu_seq" in n.lower()]


def test_the_docstring_example_is_not_what_the_code_does():
    """Finding (documentation): reorder_causal_load_balanced's docstring (copied from TE's
    ReorderStrategy) puts tokens [4, 5, 10, 11] of 16 on GPU1 of 4; every one of MaxText's dual
    chunk swap functions puts [2, 3, 12, 13] there, the contract's order and reorder_sequence's own
    docstring's ([0, 1, 6, 7] on GPU0 of 2)."""
    from maxtext.utils import max_utils

    assert "GPU1: [4, 5, 10, 11]" in max_utils.reorder_causal_load_balanced.__doc__
    assert "[0, 1, 2, 3, 4, 5, 6, 7] -> [0, 1, 6, 7, 2, 3, 4, 5]" in max_utils.reorder_sequence.__doc__
    lay = layout(4, "ring", "dual_chunk_swap")
    for cls in (maxtext_cp.DualChunkSwap, maxtext_cp.MaskDualChunkSwap, maxtext_cp.GpuDualChunkSwap):
        assert cls().cp_permutation(lay, problem(1, 16))[0, 4:8].tolist() == [2, 3, 12, 13]


def test_the_planted_twin_restoring_with_the_forward_reorder_is_caught():
    from planted_maxtext_cp import DualChunkSwapForwardAsInverse

    twin = DualChunkSwapForwardAsInverse()
    lay, p = layout(4, "ring", "dual_chunk_swap"), problem(1, 16)
    values = np.arange(16, dtype=np.float64).reshape(1, 16, 1)
    assert not np.array_equal(twin.cp_reorder(lay, p, twin.cp_reorder(lay, p, values, 1, False), 1, True), values)
