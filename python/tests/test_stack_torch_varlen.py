"""attn_oracle.stacks.torch_varlen: on the CPU, the real varlen_attn (its Python, custom op and
autograd) over the FlashAttention-2 stand-in kernel (flash_varlen_standin.py) passes the
attention properties and each planted twin (planted_torch_varlen.py) fails, shrunk small; the
real library's own statements the module relies on (lse heads first, causal from the window)
are read off it. With a CUDA device, the module itself against the real kernel, and the
kernel's refusals behind the domain. Skipped, saying why, without torch 2.11 or newer
(scripts/stacks makes the venv) or, for the GPU tests, without a CUDA device."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks --only torch_flex makes a venv with it")
varlen = pytest.importorskip("torch.nn.attention.varlen", reason="this torch has no varlen_attn (2.11 or newer)")

import numpy as np  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402

import flash_varlen_standin  # noqa: E402
import standin_torch_varlen  # noqa: E402
from attn_oracle import oracle, worker  # noqa: E402
from attn_oracle.errors import Unsupported  # noqa: E402
from attn_oracle.stacks import torch_varlen  # noqa: E402

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device: varlen_attn's kernel is CUDA only (scripts/stacks --device run)")


def problem(mask="padding_causal_bottom_right", window=(-1, -1), dtype="fp16", backward=True, head_dim=8):
    b = worker.Batch(np.array([[1, 1, 2, 2, 2, 0]]), np.array([[0, 1, 0, 1, 2, 0]]), np.array([[1, 1, 1, 2, 2, 3]]),
                     np.array([[0, 1, 2, 0, 1, 0]]), mask, window, 3)
    rng = np.random.default_rng(0)
    rounded = lambda s: torch.from_numpy(rng.uniform(-1, 1, s)).to(torch.float16).double().numpy()  # noqa: E731
    x = worker.Inputs(rounded((1, 6, 4, head_dim)), rounded((1, 6, 2, head_dim)), rounded((1, 6, 2, head_dim)),
                      rounded((1, 6, 4, head_dim)) if backward else None)
    return worker.Problem(b, 4, 2, head_dim, None, dtype, backward), x


def reference(p, x):
    b = p.batch
    return oracle.attention(x.q, x.k, x.v, do=x.do, q_segment_ids=b.q_segment_ids, q_segment_pos=b.q_segment_pos,
                            kv_segment_ids=b.kv_segment_ids, kv_segment_pos=b.kv_segment_pos, mask=b.mask,
                            window=b.window, max_segments=b.max_segments, dtype=p.dtype)


def test_the_real_library_gives_lse_heads_first_whatever_its_docstring_says():
    q = torch.empty(7, 3, 8, device="meta", dtype=torch.float16)
    cu = torch.tensor([0, 3, 7], device="meta", dtype=torch.int32)
    _, lse = varlen.varlen_attn(q, q, q, cu, cu, 4, 4, return_aux=varlen.AuxRequest(lse=True))
    assert tuple(lse.shape) == (3, 7)  # torch's fake implementation: (H, T_q)
    documented = "(T_q, H)" if torch.__version__.startswith("2.11") else "(H_q, T_q)"  # 2.15 fixed its docstring
    assert documented in varlen.varlen_attn.__doc__


@pytest.mark.parametrize("window, causal", [((-1, 0), True), ((2, 0), False), ((-1, -1), False), ((1, 1), False)])
def test_the_real_library_is_causal_only_for_the_window_minus_one_zero(monkeypatch, window, causal):
    seen = []
    monkeypatch.setattr(flash_varlen_standin, "forward_hook", lambda kwargs: seen.append(kwargs), raising=False)
    q = torch.zeros(4, 1, 8, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    varlen.varlen_attn(q, q, q, cu, cu, 4, 4, window_size=window)
    assert [(s["is_causal"], s["window_size_left"], s["window_size_right"]) for s in seen] == [(causal, *window)]


def test_the_mapping_matches_the_reference_forward_and_backward_on_the_standin():
    p, x = problem()
    got, want = standin_torch_varlen.Backend().attention(p, x), reference(p, x)
    for name in ("o", "dq", "dk", "dv"):
        assert np.allclose(got[name], getattr(want, name), atol=2e-2), name
    assert np.array_equal(np.isinf(got["lse"]), np.isinf(want.lse))
    assert np.allclose(got["lse"][np.isfinite(want.lse)], want.lse[np.isfinite(want.lse)], atol=2e-2)


def test_a_batch_with_no_key_token_gets_nothing_attended_without_a_call():
    # Queries with no key pair no document, so the call would be of no sequence, which FA2 refuses
    # ("batch size must be positive": 5 properties in the second H100 run, bench/results/stacks-gpu-runs.md);
    # the stand-in refuses it too, so a call would fail here.
    b = worker.Batch(np.array([[1]]), np.array([[0]]), np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64),
                     "no_mask", (-1, -1), 1)
    x = worker.Inputs(np.full((1, 1, 2, 8), 0.5), np.zeros((1, 0, 1, 8)), np.zeros((1, 0, 1, 8)),
                      np.ones((1, 1, 2, 8)))
    got = standin_torch_varlen.Backend().attention(worker.Problem(b, 2, 1, 8, None, "fp16", True), x)
    assert np.array_equal(got["o"], np.zeros((1, 1, 2, 8))) and np.array_equal(got["lse"], np.full((1, 2, 1), -np.inf))
    assert got["dq"].shape == (1, 1, 2, 8) and got["dk"].shape == (1, 0, 1, 8) and not got["dq"].any()


def test_a_top_left_batch_flash_attention_cannot_say_is_declined_naming_the_convention():
    p, x = problem(mask="padding_causal")  # top-left, document 1 has 2 queries and 3 keys from 0
    with pytest.raises(Unsupported, match="FlashAttention's convention cannot say"):
        standin_torch_varlen.Backend().attention(p, x)


def test_check_passes_the_attention_properties_on_the_standin(tmp_path):
    done, results = check(tmp_path, "standin_torch_varlen:Backend", "--filter", "attention/", "--cases", "12")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    judged = sum(r["draws"]["judged"] for r in results.values() if r["verdict"] != "skipped")
    drawn = sum(r["draws"]["total"] for r in results.values() if r["verdict"] != "skipped")
    assert judged >= 0.85 * drawn, results  # 90% on the H100 (bench/results/stacks-gpu-runs.md)


@pytest.mark.parametrize("twin", ["LseAsDocumented", "CausalFlagForgotten"])
def test_each_planted_twin_fails_shrunk_small(tmp_path, twin):
    done, results = check(tmp_path, f"planted_torch_varlen:{twin}", "--filter", "attention/matchesReference",
                          "--cases", "40", "--seed", "1")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "attention/matchesReference" in failed(results)
    case = counterexample(done, "attention/matchesReference")
    tokens = np.asarray(case["q"]["segment_ids"]).size + np.asarray(case["kv"]["segment_ids"]).size
    assert tokens <= 8, case


@gpu
def test_check_passes_on_cuda(tmp_path):
    done, results = check(tmp_path, "attn_oracle.stacks.torch_varlen:Backend", "--filter", "attention/", "--cases", "20")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@gpu
@pytest.mark.parametrize("dtype, head_dim", [(torch.float32, 64), (torch.float16, 12), (torch.float16, 264)])
def test_the_kernel_refuses_what_the_domain_leaves_out(dtype, head_dim):
    q = torch.zeros(4, 1, head_dim, dtype=dtype, device="cuda")
    cu = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError):
        varlen.varlen_attn(q, q, q, cu, cu, 4, 4)
