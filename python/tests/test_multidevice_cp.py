"""The multi-device context-parallel runners (attn_oracle.multidevice) called directly on small
problems and compared with cp_reference.py, a float64 NumPy reference written from the contract:
cp 2, 3, 4 and 8, every strategy and balance, every mask kind, windows, backward; each rank's
metadata and forward at each step; the permutation against the layout definitions; the error
codes. Each runner's tests skip with the reason when its framework does not import: scripts/test
runs them with JAX in build/python-venv-jax; torch's where it is installed (scripts/stacks'
build/stacks/torch: build/stacks/torch/bin/python -m pytest python/tests/test_multidevice_*.py), and
the torch runner's fault tests (a rank that hangs, one that raises) live in
test_multidevice_torch_faults.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cp_reference as ref
from attn_oracle.errors import AttnOracleError, Unsupported
from attn_oracle import worker
from attn_oracle.domain import CP_BALANCES as BALANCES, CP_STRATEGIES as STRATEGIES
from attn_oracle.multidevice import _host

# While collected: a module collected later may start JAX (test_stack_jax_cudnn asks for its backend), after
# which XLA makes no more host devices.
_host.ask_for_host_devices()

CP_SIZES = (2, 3, 4, 8)
WINDOWS = ((-1, -1), (3, -1), (2, 1), (-1, 0))


def _jax_runner():
    pytest.importorskip("jax", reason="jax is not installed (scripts/test runs these in build/python-venv-jax)")
    from attn_oracle.multidevice import jax_shard_map

    backend = jax_shard_map.Backend()
    if backend.max_ranks < max(CP_SIZES):
        pytest.skip(f"JAX has {backend.max_ranks} devices: it started before jax_shard_map set XLA_FLAGS "
                    f"(run this file alone, or set XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return backend


def _torch_runner():
    pytest.importorskip("torch", reason="torch is not installed here: the torch runner's tests run in "
                                        "build/stacks/torch (scripts/stacks builds it)")
    from attn_oracle.multidevice import torch_gloo

    return torch_gloo.Backend(max_ranks=max(CP_SIZES), max_processes=sum(CP_SIZES))  # every group kept


@pytest.fixture(scope="module", params=["jax", "torch"])
def runner(request):
    backend = {"jax": _jax_runner, "torch": _torch_runner}[request.param]()
    yield backend
    if hasattr(backend, "close"):
        backend.close()


def Layout(cp, strategy="all_gather", balance="contiguous", stripe=1, indices=None):  # noqa: N802
    """The worker's Layout, with defaults."""
    return worker.Layout(cp=cp, strategy=strategy, balance=balance, stripe=stripe, indices=indices)


# ------------------------------------------------------------------ comparing
def _close(got, want, what, atol=3e-5, rtol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert not np.isnan(got).any(), f"{what}: NaN at {np.argwhere(np.isnan(got))[:3].tolist()}"
    ninf = np.isneginf(want)
    assert np.array_equal(np.isneginf(got), ninf), f"{what}: -inf at {np.argwhere(np.isneginf(got) != ninf)[:3].tolist()}"
    g, w = np.where(ninf, 0, got), np.where(ninf, 0, want)
    bad = ~np.isclose(g, w, atol=atol, rtol=rtol)
    assert not bad.any(), f"{what}: {bad.sum()} values off, first at {np.argwhere(bad)[0].tolist()}: " \
                          f"{g[tuple(np.argwhere(bad)[0])]} vs {w[tuple(np.argwhere(bad)[0])]}"


def _rank_major(x, perm, axis=1):
    shape = [1] * x.ndim
    shape[0], shape[axis] = perm.shape
    return np.take_along_axis(x, perm.reshape(shape), axis=axis)


def _check_run(backend, layout, p, x, label):
    got = backend.cp_attention(layout, p, x)
    want = ref.full_attention(p, x)
    perm = ref.permutation(layout, p.batch.q_segment_ids)
    np.testing.assert_array_equal(backend.cp_permutation(layout, p), perm, err_msg=label)
    for name in ("o", "dq", "dk", "dv"):
        if name in want:
            _close(got[name], _rank_major(want[name], perm), f"{label}: {name}")
    _close(got["lse"], _rank_major(want["lse"], perm, axis=2), f"{label}: lse")
    unattended = np.isneginf(_rank_major(want["lse"], perm, axis=2)).all(1)  # [B, T]: padding queries
    assert not np.asarray(got["o"])[unattended].any(), f"{label}: o of a query attending nothing is not exactly 0"
    if "dq" in want:
        assert not np.asarray(got["dq"])[unattended].any(), f"{label}: dq of a query attending nothing is not 0"


# ------------------------------------------------------------------ the tests
@pytest.mark.parametrize("cp", CP_SIZES)
def test_permutation_follows_the_layout_definitions(runner, cp):
    rng = np.random.default_rng(cp)
    for balance, kind in itertools.product(BALANCES, ("padding_causal", "causal")):
        p, _ = ref.problem(rng, cp, kind, balance=balance, rows=3)
        layout = ref.layout(Layout, cp, "all_gather", balance, rng, rows=3)
        got = runner.cp_permutation(layout, p)
        np.testing.assert_array_equal(got, ref.permutation(layout, p.batch.q_segment_ids),
                                      err_msg=f"cp {cp}, {balance}, ids {p.batch.q_segment_ids.tolist()}")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("cp", CP_SIZES)
def test_the_whole_run_equals_unsharded_attention(runner, cp, strategy):
    """o, lse, dq, dk, dv rank-major, every balance, mask kinds and windows in turn."""
    rng = np.random.default_rng(100 * cp + STRATEGIES.index(strategy))
    for i, balance in enumerate(BALANCES):
        kind = ref.KINDS[(i + cp) % len(ref.KINDS)]
        window = WINDOWS[(i + STRATEGIES.index(strategy)) % len(WINDOWS)]
        p, x = ref.problem(rng, cp, kind, balance=balance, window=window)
        layout = ref.layout(Layout, cp, strategy, balance, rng)
        _check_run(runner, layout, p, x, f"cp {cp}, {strategy}, {balance}, {kind}, window {window}")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("cp", CP_SIZES)
def test_each_rank_and_step(runner, cp, strategy):
    """cp_rank_attention and cp_rank_metadata of every rank at every step against the rank problems."""
    rng = np.random.default_rng(200 * cp + STRATEGIES.index(strategy))
    balance = BALANCES[(cp + STRATEGIES.index(strategy)) % len(BALANCES)]
    kind = ref.KINDS[(cp + 2 * STRATEGIES.index(strategy)) % len(ref.KINDS)]
    p, x = ref.problem(rng, cp, kind, balance=balance, window=(2, -1), backward=False)
    layout = ref.layout(Layout, cp, strategy, balance, rng)
    for rank, step in itertools.product(range(cp), range(_host.steps(layout))):
        label = f"cp {cp}, {strategy}, {balance}, {kind}: rank {rank}, step {step}"
        got, want = runner.cp_rank_attention(layout, p, x, rank, step), ref.rank_attention(layout, p, x, rank, step)
        _close(got["o"], want["o"], f"{label}: o")
        _close(got["lse"], want["lse"], f"{label}: lse")
        got_md, want_md = runner.cp_rank_metadata(layout, p, rank, step), ref.rank_metadata(layout, p, rank, step)
        for name, value in want_md.items():
            np.testing.assert_array_equal(got_md[name], value, err_msg=f"{label}: {name}")


def test_bottom_right_and_top_left_kinds_agree_on_self_attention(runner):
    rng = np.random.default_rng(7)
    p, x = ref.problem(rng, 2, "padding_causal_bottom_right", window=(2, 5))
    layout = Layout(cp=2, strategy="ring", balance="dual_chunk_swap")
    bottom_right = runner.cp_attention(layout, p, x)
    p.batch.mask, p.batch.window = "padding_causal", (2, -1)  # right ignored under bottom-right
    top_left = runner.cp_attention(layout, p, x)
    for name in bottom_right:
        np.testing.assert_array_equal(bottom_right[name], top_left[name], err_msg=name)


def test_scrambled_explicit_indices(runner):
    """A rank whose tokens the indices put out of row order: attention is still defined (and right),
    its metadata is not (the rank problem is no packed batch), and is declined."""
    rng = np.random.default_rng(11)
    p, x = ref.problem(rng, 2, "padding_causal")
    layout = ref.layout(Layout, 2, "all_gather", "explicit_indices", rng, scrambled=True)
    _check_run(runner, layout, p, x, "scrambled explicit indices")
    with pytest.raises(Unsupported, match="out of row order"):
        runner.cp_rank_metadata(layout, p, 0, 0)


def _codes(runner, layout, p):
    """The code each entry point gives (validate_cp's, in its order; the suite asks all three)."""
    codes = set()
    for call in (lambda: runner.cp_permutation(layout, p), lambda: runner.cp_rank_metadata(layout, p, 0, 0),
                 lambda: runner.cp_attention(layout, p, x_of(p))):
        with pytest.raises(AttnOracleError) as raised:
            call()
        codes.add(raised.value.code)
    assert len(codes) == 1, codes
    return codes.pop()


def x_of(p):
    t, h, hk, d = p.batch.q_segment_ids.shape[1], p.heads_q, p.heads_kv, p.head_dim
    b = len(p.batch.q_segment_ids)
    return ref.SimpleNamespace(q=np.zeros((b, t, h, d)), k=np.zeros((b, t, hk, d)), v=np.zeros((b, t, hk, d)),
                               do=np.zeros((b, t, h, d)))


def test_layouts_and_problems_it_rejects(runner):
    rng = np.random.default_rng(5)
    p, _ = ref.problem(rng, 2, "padding_causal", tokens=8, heads=(4, 2))
    assert _codes(runner, Layout(cp=0), p) == "cp_bad_layout"
    assert _codes(runner, Layout(cp=2, balance="striped", stripe=0), p) == "cp_bad_layout"
    assert _codes(runner, Layout(cp=3), p) == "cp_not_divisible"
    assert _codes(runner, Layout(cp=4, balance="striped", stripe=4), p) == "cp_not_divisible"
    assert _codes(runner, Layout(cp=4, strategy="all_to_all"), p) == "cp_heads_not_divisible"
    assert _codes(runner, Layout(cp=2, balance="explicit_indices", indices=np.zeros((2, 8), np.int64)),
                  p) == "cp_bad_permutation"
    ids = np.array([[1, 1, 1, 2, 2, 2, 2, 2]] * 2)
    p.batch.q_segment_ids = p.batch.kv_segment_ids = ids
    p.batch.q_segment_pos = p.batch.kv_segment_pos = np.array([[0, 1, 2, 0, 1, 2, 3, 4]] * 2)
    assert _codes(runner, Layout(cp=2, balance="head_tail"), p) == "cp_document_not_divisible"
    p.batch.kv_segment_pos = p.batch.q_segment_pos + 1
    assert _codes(runner, Layout(cp=2), p) == "cp_not_self_attention"


def test_more_ranks_than_the_runner_has_are_declined(runner):
    rng = np.random.default_rng(3)
    p, x = ref.problem(rng, 2, "padding", tokens=64)
    layout = Layout(cp=64)
    assert "ranks" in runner.unsupported_context_parallel(layout, p)
    with pytest.raises(Unsupported):
        runner.cp_attention(layout, p, x)
