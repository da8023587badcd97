"""attn_oracle.stacks.torch_flex against the real torch: `check` passes the
attention properties, and each planted twin (python/tests/planted_torch_flex.py)
fails, shrunk small. Skipped, saying why, where torch (2.15 checked) is absent:
scripts/stacks makes the venv. About 3-6 minutes on 2 CPU cores (flex runs
eagerly, and its first call and block mask pay for their setup)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks --only torch_flex makes a venv with it")
pytest.importorskip("torch.nn.attention.flex_attention", reason="this torch has no flex attention (2.5 or newer)")

import numpy as np  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402

from attn_oracle import oracle, worker  # noqa: E402
from attn_oracle.stacks import torch_flex  # noqa: E402


def test_the_block_mask_attends_as_the_reference_on_a_cross_attention_batch():
    b = worker.Batch(np.array([[1, 1, 2, 2, 2, 0]]), np.array([[0, 1, 0, 1, 2, 0]]), np.array([[1, 2, 2, 3]]),
                     np.array([[0, 0, 1, 0]]), "padding_causal_bottom_right", (1, -1), 3)
    p = worker.Problem(b, 2, 1, 8, None, "fp32", False)
    rng = np.random.default_rng(0)
    x = worker.Inputs(*(rng.uniform(-1, 1, s).astype(np.float32).astype(np.float64) for s in
                        ((1, 6, 2, 8), (1, 4, 1, 8), (1, 4, 1, 8))), None)
    got = torch_flex.Backend().attention(p, x)
    want = oracle.attention(x.q, x.k, x.v, q_segment_ids=b.q_segment_ids, q_segment_pos=b.q_segment_pos,
                            kv_segment_ids=b.kv_segment_ids, kv_segment_pos=b.kv_segment_pos, mask=b.mask,
                            window=b.window, max_segments=3, dtype="fp32")
    assert np.allclose(got["o"], want.o, atol=1e-5)
    assert np.array_equal(np.isinf(got["lse"]), np.isinf(want.lse))  # the queries that attend nothing: -inf
    assert np.allclose(got["lse"][np.isfinite(want.lse)], want.lse[np.isfinite(want.lse)], atol=1e-5)


def test_backward_is_declared_only_where_flex_has_it():
    assert ("gradients" in torch_flex.Backend.outputs) == torch.cuda.is_available()


def test_check_passes_the_attention_properties(tmp_path):
    done, results = check(tmp_path, "attn_oracle.stacks.torch_flex:Backend", "--filter", "attention/", "--cases", "8")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert results["attention/matchesReference"]["draws"]["judged"] >= 6


@pytest.mark.parametrize("twin", ["ForgetsDocuments", "TopLeftForBottomRight"])
def test_each_planted_twin_fails_shrunk_small(tmp_path, twin):
    done, results = check(tmp_path, f"planted_torch_flex:{twin}", "--filter", "attention/matchesReference",
                          "--cases", "30", "--seed", "1")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "attention/matchesReference" in failed(results)
    case = counterexample(done, "attention/matchesReference")
    tokens = np.asarray(case["q"]["segment_ids"]).size + np.asarray(case["kv"]["segment_ids"]).size
    assert tokens <= 8, case


# ---- declines, shown against the real library (docs/stacks.md, "Declines, shown")
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

from attn_oracle.errors import Unsupported  # noqa: E402


def test_flex_refuses_an_empty_key_side():
    with pytest.raises(IndexError):
        flex_attention(torch.zeros(1, 1, 4, 8), torch.zeros(1, 1, 0, 8), torch.zeros(1, 1, 0, 8))


def test_create_block_mask_refuses_an_empty_query_side_under_the_modules_mask_mod():
    b = worker.Batch(np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64), np.array([[1, 1]]), np.array([[0, 1]]),
                     "no_mask", (-1, -1), 1)
    backend = torch_flex.Backend()
    t = backend.mask_tensors(b)
    with pytest.raises(IndexError):
        create_block_mask(backend.mask_mod(t, b.mask, b.window), 1, None, 0, 2, device="cpu")
    assert "query side with no tokens" in backend.unsupported_attention(worker.Problem(b, 1, 1, 8, None, "fp32", False))


def test_flex_answers_an_invalid_batch_so_the_module_declines_it():
    ids = torch.tensor([[2, 1]])  # ids out of order: the reference rejects the batch
    block_mask = create_block_mask(lambda b, h, q, k: ids[b, q] == ids[b, k], 1, None, 2, 2, device="cpu")
    assert flex_attention(torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8),
                          block_mask=block_mask).shape == (1, 1, 2, 8)
    b = worker.Batch(np.array([[2, 1]]), np.array([[0, 0]]), np.array([[2, 1]]), np.array([[0, 0]]), "no_mask",
                     (-1, -1), 2)
    with pytest.raises(Unsupported, match="ids_out_of_order"):
        torch_flex.Backend().block_mask(b)


def test_flex_has_no_backward_on_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: flex's backward runs there")
    q = torch.zeros(1, 1, 4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, q, q).sum().backward()


class _CompiledOnCuda(torch_flex.Compiled):
    device = "cuda"


def test_compiled_on_cuda_declines_head_dims_below_16_and_its_domain_draws_none():
    b = worker.Batch(np.array([[1, 1]]), np.array([[0, 1]]), np.array([[1, 1]]), np.array([[0, 1]]), "causal",
                     (-1, -1), 1)
    assert "below 16" in _CompiledOnCuda().unsupported_attention(worker.Problem(b, 1, 1, 8, None, "fp32", False))
    assert _CompiledOnCuda().unsupported_attention(worker.Problem(b, 1, 1, 16, None, "fp32", False)) is None
    assert min(torch_flex.CUDA_HEAD_DIMS) == 16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: compiled flex's CUDA lowering is what refuses")
def test_compiled_flex_on_cuda_refuses_a_head_dim_below_16():
    q = torch.zeros(1, 1, 16, 8, device="cuda")
    with pytest.raises(Exception, match="at least 16"):
        torch.compile(flex_attention, dynamic=False)(q, q, q)
