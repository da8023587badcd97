"""attn_oracle.stacks.torch_cp against the real torch (2.15 checked; skipped where it is absent):
the load balancers' permutation and reorder against the CP contract (cp_contract.py), and the
forward of real CP ranks (gloo processes on this machine) against the oracle, rank-major; a rank
that fails or hangs reported and its pool torn down; each decline shown against torch. About a
two minutes on two cores (each pool of ranks imports torch once; the hung rank waits 20 s)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks --only torch_cp makes a venv with it")
pytest.importorskip("torch.distributed.tensor.experimental._context_parallel",
                    reason="this torch has no context parallelism for flex attention")

import numpy as np  # noqa: E402

import cp_contract as cc  # noqa: E402
from attn_oracle import oracle, worker  # noqa: E402
from attn_oracle.errors import Unsupported  # noqa: E402
from attn_oracle.stacks import torch_cp  # noqa: E402

PADDED = [[0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 2, 2, 2, 2, 2, 2],
          [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 0, 0]]


def layouts(cp, ids):
    t = len(ids[0])
    rng = np.random.default_rng(cp)
    return [cc.layout(cp, balance="contiguous"), cc.layout(cp, balance="dual_chunk_swap"),
            cc.layout(cp, balance="head_tail"),
            cc.layout(cp, balance="explicit_indices", indices=cc.random_explicit_indices(rng, len(ids), t, cp))]


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_each_balancer_holds_the_contracts_permutation(cp):
    prob = cc.problem(PADDED if cp < 4 else [[1] * 8 + [2] * 8 + [0] * 16, [0] * 8 + [3] * 24], mask="padding")
    for lay in layouts(cp, np.asarray(prob.batch.q_segment_ids)):
        assert np.array_equal(torch_cp.Backend().cp_permutation(lay, prob), cc.permutation(lay, prob)), lay.balance


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_reorder_is_the_permutation_and_restores_it(cp):
    prob = cc.problem([[1] * 8 + [2] * 8 + [0] * 16, [0] * 8 + [3] * 24], mask="padding")
    values = np.random.default_rng(1).uniform(size=(2, 32, 2))
    for lay in layouts(cp, np.asarray(prob.batch.q_segment_ids)):
        forward = torch_cp.Backend().cp_reorder(lay, prob, values, 2, False)
        assert np.array_equal(forward, np.take_along_axis(values, cc.permutation(lay, prob)[..., None], 1)), lay.balance
        assert np.array_equal(torch_cp.Backend().cp_reorder(lay, prob, forward, 2, True), values), lay.balance


def inputs_for(prob, seed=0):
    b, t = np.shape(prob.batch.q_segment_ids)
    rng = np.random.default_rng(seed)
    shape = lambda h: (b, t, h, prob.head_dim)  # noqa: E731
    return worker.Inputs(*(rng.uniform(-1, 1, s).astype(np.float32).astype(np.float64)
                           for s in (shape(prob.heads_q), shape(prob.heads_kv), shape(prob.heads_kv))), None)


def reference(prob, x):
    b = prob.batch
    return oracle.attention(x.q, x.k, x.v, q_segment_ids=b.q_segment_ids, q_segment_pos=b.q_segment_pos, mask=b.mask,
                            window=b.window, max_segments=b.max_segments, dtype=prob.dtype)


@pytest.mark.parametrize("cp", [2, 4])
def test_the_ranks_forward_matches_the_oracle_rank_major(cp):
    ids = PADDED if cp == 2 else [[1] * 8 + [2] * 8 + [0] * 16, [0] * 8 + [3] * 24]
    for mask, window in (("padding_causal", (-1, -1)), ("padding_causal_bottom_right", (2, -1)), ("padding", (1, 1))):
        prob = cc.problem(ids, mask=mask, window=window, heads=(4, 2))
        x = inputs_for(prob)
        want = reference(prob, x)
        for lay in layouts(cp, ids):
            got = torch_cp.Backend().cp_attention(lay, prob, x)
            perm = cc.permutation(lay, prob)
            o = np.take_along_axis(want.o, perm[:, :, None, None], 1)
            lse = np.take_along_axis(want.lse, perm[:, None, :], 2)
            assert np.allclose(got["o"], o, atol=1e-5), (mask, lay.balance)
            assert np.array_equal(np.isneginf(got["lse"]), np.isneginf(lse)), (mask, lay.balance)
            assert np.allclose(got["lse"][np.isfinite(lse)], lse[np.isfinite(lse)], atol=1e-5), (mask, lay.balance)
            local = len(ids[0]) // cp
            one = torch_cp.Backend().cp_rank_attention(lay, prob, x, cp - 1, 0)
            assert np.array_equal(one["o"], got["o"][:, (cp - 1) * local:]), lay.balance


def test_a_rank_that_raises_is_reported_and_the_pool_torn_down():
    pool = torch_cp._pool(2)
    procs = list(pool.procs)
    with pytest.raises(torch_cp.RankFailure, match="rank 0 raised"):
        pool.run({"not": "a task"})
    assert 2 not in torch_cp._POOLS and all(p.poll() is not None for p in procs)


def test_a_rank_that_hangs_is_reported_by_rank(monkeypatch):
    monkeypatch.setenv("ATTN_ORACLE_TORCH_CP_TIMEOUT", "20")
    pool = torch_cp._pool(2)
    procs = list(pool.procs)
    # Rank 1 alone gets a task: rank 0 never joins its all-gather, so rank 1 waits in it.
    prob = cc.problem([[1, 1, 1, 1]])
    x = inputs_for(prob)
    task = {"ids": np.asarray(prob.batch.q_segment_ids), "pos": np.asarray(prob.batch.q_segment_pos),
            "mask": "causal", "window": (-1, -1), "max_segments": 1, "dtype": "fp32", "scale": 0.5, "gqa": False,
            "q": x.q, "k": x.k, "v": x.v, "layout": {"cp": 2, "strategy": "all_gather", "balance": "contiguous"}}
    pool.conns[1].send(task)
    with pytest.raises(torch_cp.RankFailure, match="rank 0 hung"):
        pool._collect("a forward")
    assert all(p.poll() is not None for p in procs)


# ---- declines, shown against torch


def test_flex_has_no_backward_on_the_cpu_so_backward_is_declined():
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.zeros(1, 1, 4, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q).sum().backward()
    prob = cc.problem([[1, 1, 1, 1]], backward=True)
    with pytest.raises(Unsupported, match="backward on a CPU"):
        torch_cp.Backend().cp_attention(cc.layout(2), prob, inputs_for(prob))
    assert torch_cp.Backend.outputs == ("lse",)


def test_flex_cp_takes_no_cu_seqlens_so_rank_metadata_is_not_served():
    import inspect

    from torch.nn.attention.flex_attention import flex_attention

    assert "block_mask" in inspect.signature(flex_attention).parameters
    assert not any("seqlen" in p for p in inspect.signature(flex_attention).parameters)
    assert not hasattr(torch_cp.Backend, "cp_rank_metadata")
    assert callable(torch_cp.Backend.cp_attention) and callable(torch_cp.Backend.cp_rank_attention)


def test_the_cp_block_mask_needs_t_a_multiple_of_cp_times_its_block():
    from torch.distributed.tensor.experimental._context_parallel._attention import _create_cp_block_mask

    class Mesh:  # what _create_cp_block_mask reads before it refuses
        def size(self):
            return 2

    with pytest.raises(NotImplementedError, match="not divisible"):
        _create_cp_block_mask(lambda b, h, q, k: q >= k, 1, 1, 8, 8, (128, 128), Mesh())
    assert torch_cp.block_size(4) == 4 and torch_cp.block_size(256) == 128 and torch_cp.block_size(6) == 6


def test_there_is_no_striped_balancer_and_ptrr_picks_its_own_order():
    assert "striped" not in torch_cp.Backend.domain.cp_balances
    with pytest.raises(Unsupported, match="striped"):
        torch_cp.load_balancer(cc.layout(2, balance="striped", stripe=1), cc.problem([[1, 1, 1, 1]]))


def test_an_invalid_batch_is_declined_before_any_rank_runs():
    prob = cc.problem([[1, 1, 2, 1]], pos=[[0, 1, 0, 0]])  # document 1 is not contiguous
    with pytest.raises(Unsupported, match="noncontiguous"):
        torch_cp.Backend().cp_attention(cc.layout(2), prob, inputs_for(prob))


def test_the_planted_twin_that_takes_the_restore_indices_is_caught():
    import planted_cp_stacks

    prob = cc.problem(PADDED, mask="padding")
    for lay in layouts(2, PADDED)[1:3]:  # dual_chunk_swap, head_tail
        assert not np.array_equal(planted_cp_stacks.TorchCp().cp_permutation(lay, prob), cc.permutation(lay, prob))


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_random_padded_batches_hold_the_contracts_permutation(cp):
    rng = np.random.default_rng(cp)
    for draw in range(10):
        ids = cc.random_spans_rows(rng, int(rng.integers(1, 4)), cp, spans=int(rng.integers(1, 4)))
        prob = cc.problem(ids, mask="padding")
        for lay in layouts(cp, ids):
            assert np.array_equal(torch_cp.Backend().cp_permutation(lay, prob), cc.permutation(lay, prob)), (ids, lay)


def test_random_forwards_at_cp_3_match_the_oracle():
    from attn_oracle.domain import MASK_KINDS

    rng = np.random.default_rng(3)
    for draw in range(4):
        ids = cc.random_spans_rows(rng, int(rng.integers(1, 3)), 3, spans=int(rng.integers(1, 3)))
        kind = str(rng.choice([k for k in MASK_KINDS if k.startswith("padding")]))
        window = tuple(int(w) for w in rng.choice([-1, 0, 2], size=2))
        prob = cc.problem(ids, mask=kind, window=window, heads=(2, 1), d=8)
        x = inputs_for(prob, draw)
        want = reference(prob, x)
        lay = layouts(3, ids)[int(rng.integers(0, 4))]
        got = torch_cp.Backend().cp_attention(lay, prob, x)
        perm = cc.permutation(lay, prob)
        lse = np.take_along_axis(want.lse, perm[:, None, :], 2)
        assert np.allclose(got["o"], np.take_along_axis(want.o, perm[:, :, None, None], 1), atol=1e-5), (ids, kind, window)
        assert np.array_equal(np.isneginf(got["lse"]), np.isneginf(lse)), (ids, kind, window)
        assert np.allclose(got["lse"][np.isfinite(lse)], lse[np.isfinite(lse)], atol=1e-5), (ids, kind, window)


# ---- invalid layouts: torch's own refusals, as the contract's codes


@pytest.mark.parametrize("balance, ids, code", [
    ("dual_chunk_swap", [[1] * 6], "cp_not_divisible"),              # T = 6, 2*cp = 4: the balancer asserts
    ("head_tail", [[1] * 6 + [2] * 2], "cp_document_not_divisible"),  # a document of 6
    ("contiguous", [[1] * 5], "cp_not_divisible"),                     # _create_cp_block_mask's NotImplementedError
    ("head_tail", [[1] * 8 + [2] * 3], "cp_not_divisible"),            # the balancer names a span, the row is off cp
])
def test_torchs_checks_give_the_contracts_codes(balance, ids, code):
    from attn_oracle.errors import AttnOracleError

    with pytest.raises(AttnOracleError) as e:
        torch_cp.Backend().validate_cp_layout(cc.layout(2, balance=balance), cc.problem(ids))
    assert e.value.code == code, e.value


def test_torch_checks_no_explicit_indices_so_a_repeated_index_is_accepted():
    prob = cc.problem([[1, 1, 1, 1]])
    lay = cc.layout(2, balance="explicit_indices", indices=np.array([[0, 0, 2, 3]]))  # token 0 twice, token 1 never
    assert torch_cp.Backend().validate_cp_layout(lay, prob) is None
    assert torch_cp.Backend().cp_permutation(lay, prob).tolist() == [[0, 0, 2, 3]]


def test_a_forward_at_cp_8_matches_the_oracle():
    ids = [[1] * 16 + [2] * 32 + [0] * 16]
    prob = cc.problem(ids, mask="padding_causal", heads=(2, 2), d=4)
    x = inputs_for(prob)
    want = reference(prob, x)
    lay = cc.layout(8, balance="head_tail")
    got = torch_cp.Backend().cp_attention(lay, prob, x)
    perm = cc.permutation(lay, prob)
    assert np.allclose(got["o"], np.take_along_axis(want.o, perm[:, :, None, None], 1), atol=1e-5)
    torch_cp._POOLS[8].close()  # eight rank processes: not kept for the other tests
