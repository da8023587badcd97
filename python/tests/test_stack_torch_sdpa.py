"""attn_oracle.stacks.torch_sdpa against the real torch: on the CPU the math backend (padded
rows and jagged nested tensors) passes the attention properties through the same mapping
the CUDA backends use, each planted twin (planted_torch_sdpa.py) fails shrunk small, and the
declines are torch's own refusals. With a CUDA device, each forced backend. Skipped, saying
why, without torch (scripts/stacks makes the venv) or, for the GPU tests, without CUDA."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks makes the torch venv")

import numpy as np  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402

from attn_oracle import worker  # noqa: E402
from attn_oracle.errors import Unsupported  # noqa: E402
from attn_oracle.stacks import torch_sdpa  # noqa: E402

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device: SDPA's flash, efficient and cuDNN backends are CUDA only "
                                          "(scripts/stacks --device run)")
F = torch.nn.functional
attention = torch.nn.attention


def test_nested_sdpa_refuses_is_causal_on_the_math_backend():
    x = torch.nested.nested_tensor_from_jagged(torch.zeros(5, 1, 8), torch.tensor([0, 2, 5])).transpose(1, 2)
    with attention.sdpa_kernel(attention.SDPBackend.MATH), pytest.raises(RuntimeError, match="No available kernel|No viable"):
        F.scaled_dot_product_attention(x, x, x, is_causal=True)
    b = worker.Batch(np.array([[1, 1, 2]]), np.array([[0, 1, 0]]), np.array([[1, 1, 2]]), np.array([[0, 1, 0]]),
                     "causal", (-1, -1), 2)
    p = worker.Problem(b, 1, 1, 8, None, "fp32", False)
    x = worker.Inputs(*(np.zeros((1, 3, 1, 8)) for _ in range(3)), None)
    with pytest.raises(Unsupported, match="math backend refuses"):
        torch_sdpa.MathJagged().attention(p, x)


def test_nested_sdpa_takes_no_mask_so_a_window_is_declined():
    b = worker.Batch(np.array([[1, 1, 1]]), np.array([[0, 1, 2]]), np.array([[1, 1, 1]]), np.array([[0, 1, 2]]),
                     "causal", (1, -1), 1)
    with pytest.raises(Unsupported, match="nested SDPA takes no mask"):
        torch_sdpa.jagged_layout(b)
    x = torch.nested.nested_tensor_from_jagged(torch.zeros(3, 1, 8), torch.tensor([0, 3])).transpose(1, 2)
    with pytest.raises((ValueError, RuntimeError)):
        F.scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(1, 1, 3, 3, dtype=torch.bool))


@pytest.mark.parametrize("target, least", [("attn_oracle.stacks.torch_sdpa:MathPadded", 60),
                                           ("attn_oracle.stacks.torch_sdpa:MathJagged", 60),
                                           ("standin_torch_sdpa:PaddedAsFused", 60),
                                           ("standin_torch_sdpa:OneKeyTwice", 60)])
def test_check_passes_the_attention_properties_on_the_cpu(tmp_path, target, least):
    done, results = check(tmp_path, target, "--filter", "attention/", "--cases", "12")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert sum(r["draws"]["judged"] for r in results.values()) >= least, results


@pytest.mark.parametrize("twin", ["MaskedMeansTrue", "JaggedWithoutDocuments", "OneKeyTwiceNextKey"])
def test_each_planted_twin_fails_shrunk_small(tmp_path, twin):
    done, results = check(tmp_path, f"planted_torch_sdpa:{twin}", "--filter", "attention/matchesReference",
                          "--cases", "40", "--seed", "1")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "attention/matchesReference" in failed(results)
    case = counterexample(done, "attention/matchesReference")
    assert np.asarray(case["q"]["segment_ids"]).size + np.asarray(case["kv"]["segment_ids"]).size <= 8, case


def test_the_fused_padded_classes_map_what_their_backends_refuse_instead_of_declining_it():
    assert not torch_sdpa.EfficientPadded.enable_gqa and torch_sdpa.EfficientPadded.min_kv == 1
    assert torch_sdpa.CudnnPadded.min_q == 1 and torch_sdpa.CudnnPadded.min_kv == 2
    # One key and a query side of none: both padded, and what comes back has the batch's shapes.
    b = worker.Batch(np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64), np.array([[1]]), np.array([[0]]),
                     "padding", (-1, -1), 1)
    x = worker.Inputs(np.zeros((1, 0, 2, 8)), np.ones((1, 1, 1, 8)), np.ones((1, 1, 1, 8)), np.zeros((1, 0, 2, 8)))
    got = __import__("standin_torch_sdpa").PaddedAsFused().attention(worker.Problem(b, 2, 1, 8, None, "fp32", True), x)
    assert got["o"].shape == (1, 0, 2, 8) and got["dk"].shape == (1, 1, 1, 8) and not got["dk"].any()


def test_cudnn_on_nested_tensors_sends_a_sequence_with_one_key_with_that_key_twice():
    rows, lengths = torch_sdpa.CudnnJagged().key_rows(np.array([1, 2, 1]))
    assert rows.tolist() == [0, 0, 1, 2, 3, 3] and lengths.tolist() == [2, 2, 2]
    assert torch_sdpa.EfficientJagged().key_rows(np.array([1, 2]))[0] is None


def test_cudnn_on_nested_tensors_declines_a_backward_with_a_sequence_longer_than_the_head_dim():
    # torch's nested cuDNN backward sizes dq's accumulator by the head dim (pytorch/pytorch PR #186142):
    # the H100's wrong dq was query 8 of 9 at head dim 8, with one key, which the key twice does not avoid.
    nine = worker.Batch(np.ones((1, 9), np.int64), np.arange(9)[None], np.ones((1, 1), np.int64),
                        np.zeros((1, 1), np.int64), "no_mask", (-1, -1), 1)
    with pytest.raises(Unsupported, match="sequence of 9 tokens over head dim 8.*#186142"):
        torch_sdpa.CudnnJagged().attention(worker.Problem(nine, 1, 1, 8, None, "fp16", True), None)
    layout = torch_sdpa.jagged_layout(nine)
    assert torch_sdpa.past_head_dim(worker.Problem(nine, 1, 1, 8, None, "fp16", False), layout) is None
    assert torch_sdpa.past_head_dim(worker.Problem(nine, 1, 1, 16, None, "fp16", True), layout) is None
    assert torch_sdpa.EfficientJagged().unsupported_layout(worker.Problem(nine, 1, 1, 8, None, "fp16", True),
                                                           layout) is None


@gpu
@pytest.mark.parametrize("backend, q_shape, kv_shape, words", [
    ("EFFICIENT_ATTENTION", (1, 2, 4, 64), (1, 1, 4, 64), "same num_heads"),  # 2.11: no dense GQA
    ("EFFICIENT_ATTENTION", (1, 1, 4, 64), (1, 1, 0, 64), "zero seq_len"),
    ("CUDNN_ATTENTION", (1, 1, 4, 64), (1, 1, 1, 64), "key/value sequence length 1")])
def test_the_fused_backends_refuse_what_the_padded_classes_map(backend, q_shape, kv_shape, words):
    if words == "same num_heads" and not torch.__version__.startswith("2.11"):
        pytest.skip("efficient attention takes dense GQA after 2.11")
    q, kv = (torch.zeros(s, dtype=torch.float16, device="cuda") for s in (q_shape, kv_shape))
    gqa = q_shape[1] != kv_shape[1]
    mask = torch.ones(1, 1, q_shape[2], kv_shape[2], dtype=torch.bool, device="cuda")
    torch.set_warn_always(True)  # cuDNN's reason is TORCH_WARN_ONCE
    try:
        with attention.sdpa_kernel(getattr(attention.SDPBackend, backend)), pytest.warns(UserWarning, match=words), \
                pytest.raises(RuntimeError, match="No available kernel"):
            F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, enable_gqa=gqa)
    finally:
        torch.set_warn_always(False)


@gpu
@pytest.mark.parametrize("target", ["EfficientPadded", "CudnnPadded", "FlashJagged", "EfficientJagged", "CudnnJagged"])
def test_check_passes_on_cuda(tmp_path, target):
    done, _ = check(tmp_path, f"attn_oracle.stacks.torch_sdpa:{target}", "--filter", "attention/", "--cases", "20")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@gpu
def test_the_flash_backend_takes_no_attn_mask_on_cuda():
    q = torch.zeros(1, 1, 4, 64, dtype=torch.float16, device="cuda")
    with attention.sdpa_kernel(attention.SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="No available kernel"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool, device="cuda"))


def test_torchs_own_nested_flash_path_reads_is_causal_bottom_right_on_the_cpu_standin(tmp_path):
    # torch/nested/_internal/sdpa.py hands is_causal to aten::_flash_attention_forward as it is; over a
    # kernel with FlashAttention-2's documented causal (bottom-right) a document with fewer keys than
    # queries loses its first queries' keys, as on the H100 (docs/findings/torch-2.11-sdpa-nested-flash-
    # causal-bottom-right.md). SDPA documents top-left: the check fails, shrunk to such a document.
    done, results = check(tmp_path, "standin_torch_sdpa:FlashJagged", "--filter", "attention/matchesReference",
                          "--cases", "40", "--seed", "1")
    assert done.returncode == 1 and "attention/matchesReference" in failed(results), done.stdout[-4000:]
    case = counterexample(done, "attention/matchesReference")
    q, kv = np.asarray(case["q"]["segment_ids"]), np.asarray(case["kv"]["segment_ids"])
    assert "causal" in case["mask"] and any((q == d).sum() > (kv == d).sum() for d in set(q[q != 0].tolist())), case
