"""attn_oracle.stacks.xformers_attention: on the CPU, xformers' own flash operator (its bias
translation, custom ops and autograd) over the FlashAttention-2 stand-in kernel passes the
attention properties, the planted twin fails shrunk small, and each decline is the library's
own refusal (a bias that raises when made, an operator's not_supported_reasons). With a CUDA
device, every operator class against the real kernels. Skipped, saying why, without
xformers (scripts/stacks --device stage fetches its wheel; `pip install xformers==0.0.35`
into build/stacks/torch for the CPU tests) or, for the GPU tests, without a CUDA device."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks makes the torch venv")
pytest.importorskip("xformers.ops.fmha", reason="xformers is not installed: pip install xformers==0.0.35 "
                                                "into build/stacks/torch (python/attn_oracle/stacks/requirements-device.txt)")

import numpy as np  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402

import standin_xformers  # noqa: E402
from attn_oracle import worker  # noqa: E402
from attn_oracle.errors import Unsupported  # noqa: E402
from attn_oracle.stacks import xformers_attention as xa  # noqa: E402

fmha = xa.fmha
CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device: xformers' operators are CUDA only (scripts/stacks --device run)")


def layout(q_len, kv_len, alignment="top_left", left=None, right=0):
    return {"q_len": q_len, "kv_len": kv_len, "alignment": alignment, "left": left, "right": right}


def test_the_bottom_right_bias_refuses_a_sequence_with_fewer_keys_than_queries():
    with pytest.raises(Unsupported, match="num_keys >= num_queries"):
        xa.make_bias(layout([3], [2], "bottom_right"), "cpu")


def test_the_local_bias_refuses_a_sequence_whose_last_queries_see_no_key():
    with pytest.raises(Unsupported, match="No keys are attended"):
        xa.make_bias(layout([5], [2], "top_left", left=2), "cpu")


def test_no_operator_takes_the_two_sided_block_diagonal_bias():
    two_sided = fmha.attn_bias.BlockDiagonalLocalAttentionPaddedKeysMask
    for op in (fmha.flash.FwOp, fmha.flash.BwOp, fmha.cutlass.FwOp, fmha.cutlass.BwOp):
        assert two_sided not in op.SUPPORTED_ATTN_BIAS_TYPES, op.NAME
    with pytest.raises(Unsupported, match="two sides"):
        xa.make_bias(layout([2], [2], left=1, right=1), "cpu")


@pytest.mark.parametrize("mapped, expected", [
    (layout([2, 3], [4, 3], right=None), "BlockDiagonalMask"),
    (layout([2, 3], [4, 3]), "BlockDiagonalCausalMask"),
    (layout([2, 3], [4, 3], "bottom_right"), "BlockDiagonalCausalFromBottomRightMask"),
    (layout([2, 3], [4, 3], left=2), "BlockDiagonalCausalLocalAttentionMask"),
    (layout([2, 3], [4, 3], "bottom_right", left=2), "BlockDiagonalCausalLocalAttentionFromBottomRightMask")])
def test_each_band_becomes_its_bias_and_the_bias_attends_as_the_band(mapped, expected):
    bias = xa.make_bias(mapped, "cpu")
    assert type(bias).__name__ == expected
    dense = bias.materialize((5, 7)).exp() > 0  # xformers' own materialization: which keys each query sees
    lk = 4  # the first sequence: 2 queries, 4 keys
    shift = lk - 2 if mapped["alignment"] == "bottom_right" else 0
    for i in range(2):
        want = [(mapped["right"] is None or j <= i + shift) and (mapped["left"] is None or j > i + shift - mapped["left"])
                for j in range(lk)]
        assert dense[i, :lk].tolist() == want, (i, dense[i].tolist())


def test_the_flash_operator_refuses_fp32_and_an_odd_head_dim_which_its_domain_leaves_out():
    x = torch.zeros(1, 4, 1, 12, dtype=torch.float32)
    reasons = fmha.flash.FwOp.not_supported_reasons(fmha.Inputs(query=x, key=x, value=x))
    assert any("dtype=torch.float32" in r for r in reasons) and "query.shape[-1] % 8 != 0" in reasons, reasons
    assert xa.Flash.domain.dtypes == ("fp16", "bf16") and all(d % 8 == 0 for d in xa.Flash.domain.head_dims)


def test_neither_backward_operator_takes_the_bmghk_layout():
    x = torch.zeros(1, 4, 2, 2, 8, dtype=torch.float16)
    for op in (fmha.flash.BwOp, fmha.cutlass.BwOp):
        assert "operator does not support BMGHK format" in op.not_supported_reasons(fmha.Inputs(query=x, key=x, value=x)), op.NAME


def test_check_passes_the_attention_properties_on_the_standin(tmp_path):
    done, results = check(tmp_path, "standin_xformers:Flash", "--filter", "attention/", "--cases", "12")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert results["attention/matchesReference"]["draws"]["judged"] >= 8, results["attention/matchesReference"]


def test_the_planted_twin_fails_shrunk_small(tmp_path):
    done, results = check(tmp_path, "planted_xformers:WindowSizeIsLeft", "--filter", "attention/matchesReference",
                          "--cases", "60", "--seed", "1")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "attention/matchesReference" in failed(results)
    case = counterexample(done, "attention/matchesReference")
    assert np.asarray(case["q"]["segment_ids"]).size <= 8, case


@gpu
@pytest.mark.parametrize("target", ["Flash", "Cutlass", "Dispatch"])
def test_check_passes_on_cuda(tmp_path, target):
    done, _ = check(tmp_path, f"attn_oracle.stacks.xformers_attention:{target}", "--filter", "attention/", "--cases", "20")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@gpu
def test_the_dispatch_names_the_operators_it_picks():
    assert "picks" in xa.Dispatch.version, xa.Dispatch.version


def test_a_query_that_attends_nothing_stays_out_of_the_call():
    b = worker.Batch(np.array([[1, 1, 2]]), np.array([[0, 1, 0]]), np.array([[1, 2, 2]]), np.array([[0, 0, 1]]),
                     "causal_bottom_right", (-1, -1), 2)
    got = xa.call_layout(b)
    # document 1: two queries, one key, bottom-right: query 0 sees no key and is trimmed (its o stays 0)
    assert got["q_len"] == [1, 1] and got["kv_len"] == [1, 2] and got["q_tokens"].tolist() == [1, 2]


def test_where_xformers_c_does_not_load_only_its_build_gate_is_lifted():
    from xformers import _cpp_lib

    if _cpp_lib._cpp_library_load_exception is None:
        pytest.skip("xformers._C loaded with this torch: there is no gate to lift")
    # 0.0.35's _C.so needs libcudart.so.12: beside a CUDA 13 torch (here 2.15.0+cu132, on the
    # device image 2.11.0+cu130) it does not load, and xformers then refuses every operator on a
    # CUDA tensor for that alone. The version says why, in the loader's words, not xformers'.
    assert "build gate lifted" in xa.BUILD and fmha.common._built_with_cuda is True
    assert "xformers._C not loaded (" + xa.load_error(_cpp_lib._cpp_library_load_exception) + ")" in xa.BUILD
    assert "built for" not in xa.BUILD and "PyTorch" not in xa.BUILD, xa.BUILD
    # The operators the module runs are torch's kernels ("-pt"), which the CPU stand-in run above
    # drives through aten::_flash_attention_forward with _C not loaded.
    assert fmha.flash.FwOp.NAME.endswith("-pt") and fmha.cutlass.FwOp.NAME.endswith("-pt")
    # An operator that needs what was not built still says so.
    assert any("wasn't built" in r for r in fmha.flash3.FwOp.not_supported_reasons(
        fmha.Inputs(query=torch.zeros(1, 2, 1, 64, dtype=torch.float16), key=torch.zeros(1, 2, 1, 64, dtype=torch.float16),
                    value=torch.zeros(1, 2, 1, 64, dtype=torch.float16))))


def test_the_load_error_is_the_innermost_of_the_chain_xformers_keeps():
    # xformers' _cpp_lib raises xFormersInvalidLibException (naming the torch _C was built for)
    # from torch.ops.load_library's OSError, itself raised from the dynamic loader's.
    def chained():
        try:
            try:
                raise OSError("libcudart.so.12: cannot open shared object file: No such file or directory")
            except OSError as loader:
                raise OSError("Could not load this library: /x/xformers/_C.so") from loader
        except OSError as torch_said:
            raise RuntimeError("xFormers was built for:\n    PyTorch 2.10.0+cu128") from torch_said

    with pytest.raises(RuntimeError) as kept:
        chained()
    assert xa.load_error(kept.value) == ("OSError: libcudart.so.12: cannot open shared object file: "
                                         "No such file or directory")
    assert xa.load_error(ValueError("a\n  b")) == "ValueError: a b"


def test_where_xformers_c_loads_the_version_says_so(monkeypatch):
    from xformers import _cpp_lib

    monkeypatch.setattr(_cpp_lib, "_cpp_library_load_exception", None)
    assert xa._lift_build_gate() == "xformers._C loaded"


class _DispatchHere(xa.Dispatch):
    device = "cpu"


def test_the_dispatch_declines_an_input_it_finds_no_operator_for_quoting_xformers():
    # On the CPU xformers' dispatch finds no operator at all: its own NotImplementedError.
    b = worker.Batch(np.array([[1, 1]]), np.array([[0, 1]]), np.array([[1, 1]]), np.array([[0, 1]]), "causal",
                     (-1, -1), 1)
    x = worker.Inputs(*(np.zeros((1, 2, 1, 8)) for _ in range(3)), None)
    with pytest.raises(Unsupported, match="dispatch finds no operator: `.*` is not supported because: .*device=cpu"):
        _DispatchHere().attention(worker.Problem(b, 1, 1, 8, None, "fp32", False), x)
