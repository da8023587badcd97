"""attn_oracle.stacks.ring_flash_attn_cp against the real ring-flash-attn (0.1.8 checked; skipped
where it is absent): its llama3 per-rank cu_seqlens against the CP contract's rank metadata
(cp_contract.py), its lse merge against the contract's merge, and each decline shown against the
package. Seconds."""

import pytest

pytest.importorskip("torch", reason="torch is not installed: scripts/stacks makes the torch venv")
from attn_oracle.stacks import StackUnavailable  # noqa: E402

try:
    from attn_oracle.stacks import ring_flash_attn_cp
except StackUnavailable as e:  # the package is absent
    pytest.skip(f"ring-flash-attn does not import: {e}", allow_module_level=True)

import numpy as np  # noqa: E402

import cp_contract as cc  # noqa: E402
from stack_checks import check, counterexample, failed  # noqa: E402
from attn_oracle import oracle  # noqa: E402
from attn_oracle.domain import MASK_KINDS  # noqa: E402

ROW = [[1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 6]]  # 24 tokens, 6 documents


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_the_readme_split_is_the_contiguous_permutation(cp):
    prob, lay = cc.problem(ROW), cc.layout(cp, balance="contiguous")
    assert np.array_equal(ring_flash_attn_cp.Llama3().cp_permutation(lay, prob), cc.permutation(lay, prob))


@pytest.mark.parametrize("mask", [k for k in MASK_KINDS])
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_prepare_cu_seqlens_gives_each_ranks_metadata(cp, mask):
    prob, lay = cc.problem(ROW, mask=mask), cc.layout(cp, balance="contiguous")
    for rank in range(cp):
        got = ring_flash_attn_cp.Llama3().cp_rank_metadata(lay, prob, rank, 0)
        want = cc.rank_metadata(lay, prob, rank)
        cc.assert_metadata_equal(got, want, f"cp {cp} rank {rank} {mask}")
        lengths = lambda cu: np.diff(cu).max(initial=0)  # noqa: E731
        assert got["max_seqlen_q"] == lengths(want["cu_seqlens_q"])
        assert got["max_seqlen_kv"] == lengths(want["cu_seqlens_kv"])


def test_a_document_boundary_on_the_ranks_edge():
    prob, lay = cc.problem([[1] * 6 + [2] * 6], mask="causal"), cc.layout(2)
    for rank in range(2):
        cc.assert_metadata_equal(ring_flash_attn_cp.Llama3().cp_rank_metadata(lay, prob, rank, 0),
                                 cc.rank_metadata(lay, prob, rank), f"rank {rank}")


def merge_by_lse(o_a, lse_a, o_b, lse_b):
    """The contract's merge (reference/context_parallel.hpp), written here."""
    lse = np.logaddexp(lse_a, lse_b)
    safe = np.where(np.isneginf(lse), 0.0, lse)
    w = lambda l: np.where(np.isneginf(l), 0.0, np.exp(l - safe)).transpose(0, 2, 1)[..., None]  # noqa: E731
    return o_a * w(lse_a) + o_b * w(lse_b), lse


def test_update_out_and_lse_merges_as_the_contract():
    rng = np.random.default_rng(0)
    o_a, o_b = rng.uniform(-1, 1, (2, 2, 5, 3, 4))
    lse_a, lse_b = rng.uniform(-2, 2, (2, 2, 3, 5))
    lse_a[0, 1, 2] = -np.inf  # one part attends nothing of this query
    o_a[0, 2, 1] = 0.0
    got_o, got_lse = ring_flash_attn_cp.Llama3().cp_merge(o_a, lse_a, o_b, lse_b)
    want_o, want_lse = merge_by_lse(o_a, lse_a, o_b, lse_b)
    assert np.allclose(got_o, want_o, atol=1e-6) and np.allclose(got_lse, want_lse, atol=1e-6)


@pytest.mark.parametrize("running, block, package_lse", [(-np.inf, 0.5, "nan"), (0.5, -np.inf, 0.5),
                                                           (-np.inf, -np.inf, "nan")])
def test_a_part_that_attends_nothing_is_merged_by_the_package_as_shown_and_mapped(running, block, package_lse):
    import torch

    from ring_flash_attn.utils import update_out_and_lse

    o_run, o_block = (0.0 if np.isinf(running) else 1.0), (0.0 if np.isinf(block) else 2.0)
    out, lse = update_out_and_lse(None, None, torch.full((1, 1, 1), o_run), torch.tensor([[running]]))
    out, lse = update_out_and_lse(out, lse, torch.full((1, 1, 1), o_block), torch.tensor([[block]]))
    assert np.isnan(lse.item()) if package_lse == "nan" else lse.item() == package_lse  # the package's answer
    o, merged = ring_flash_attn_cp.Llama3().cp_merge(np.full((1, 1, 1, 1), o_run), np.full((1, 1, 1), running),
                                                     np.full((1, 1, 1, 1), o_block), np.full((1, 1, 1), block))
    want_o, want_lse = merge_by_lse(np.full((1, 1, 1, 1), o_run), np.full((1, 1, 1), running),
                                    np.full((1, 1, 1, 1), o_block), np.full((1, 1, 1), block))
    assert np.array_equal(o, want_o) and np.array_equal(merged, want_lse)


def test_fa2s_plus_inf_for_a_query_without_keys_would_drop_the_next_block():
    import torch

    from ring_flash_attn.utils import update_out_and_lse

    out, lse = update_out_and_lse(None, None, torch.zeros(1, 1, 1), torch.tensor([[np.inf]]))
    out, lse = update_out_and_lse(out, lse, torch.full((1, 1, 1), 2.0), torch.tensor([[0.5]]))
    assert out.item() == 0.0 and lse.item() == np.inf


# ---- declines and domain, shown against the package


def test_the_package_does_not_import_without_flash_attn_whose_kernels_are_stood_in_raising():
    import subprocess
    import sys

    try:
        import flash_attn  # noqa: F401
        pytest.skip("flash-attn imports here")
    except ImportError:
        pass
    done = subprocess.run([sys.executable, "-c", "import ring_flash_attn"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'flash_attn'" in done.stderr, done.stderr
    from ring_flash_attn import llama3_flash_attn_varlen  # the module's import: the kernels stood in, raising

    with pytest.raises(RuntimeError, match="CUDA GPU"):
        llama3_flash_attn_varlen._flash_attn_varlen_forward()


def test_without_a_cuda_device_torchs_fa2_has_no_kernel_so_attention_is_not_served():
    """In a fresh process (the tests' stand-in registers a CPU kernel in this one): torch's FA2 op
    refuses CPU tensors, and the classes then define neither attention call."""
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device: torch's FA2 runs here")
    code = """
import torch
from attn_oracle.stacks import ring_flash_attn_cp as m
print(hasattr(m.Llama3, "cp_attention"), hasattr(m.Zigzag, "cp_rank_attention"))
q = torch.zeros(4, 1, 8, dtype=torch.float16)
cu = torch.tensor([0, 4], dtype=torch.int32)
torch.ops.aten._flash_attention_forward(q, q, q, cu, cu, 4, 4, 0.0, True, False)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
    assert done.returncode != 0 and "'CPU' backend" in done.stderr, done.stderr


def test_its_init_imports_a_name_transformers_5_removed_so_the_two_files_are_loaded_alone():
    import importlib.util
    from pathlib import Path

    import transformers.modeling_flash_attention_utils as fa_utils

    adapter = Path(importlib.util.find_spec("ring_flash_attn").submodule_search_locations[0]) / "adapters" / "hf_adapter.py"
    assert "is_flash_attn_greater_or_equal_2_10" in adapter.read_text()
    if hasattr(fa_utils, "is_flash_attn_greater_or_equal_2_10"):
        pytest.skip("this transformers still has is_flash_attn_greater_or_equal_2_10")
    assert ring_flash_attn_cp.LOADED_AS and "loaded alone" in ring_flash_attn_cp.LOADED_AS[0]


def test_the_stand_in_is_not_left_in_sys_modules():
    import sys

    assert "flash_attn" not in sys.modules or hasattr(sys.modules["flash_attn"], "__file__")


def test_the_domain_is_one_row_without_padding_or_window():
    d = ring_flash_attn_cp.Llama3.domain
    assert d.max_rows == 1 and d.no_padding and not d.windows
    assert d.cp_strategies == ("all_gather",) and d.cp_balances == ("contiguous",)


def test_the_planted_twin_that_forgets_local_k_slice_is_caught():
    import planted_cp_stacks

    prob, lay = cc.problem(ROW), cc.layout(3)
    with pytest.raises(AssertionError, match="kv"):
        cc.assert_metadata_equal(planted_cp_stacks.RingLlama3().cp_rank_metadata(lay, prob, 1, 0),
                                 cc.rank_metadata(lay, prob, 1))


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_random_rows_match_the_contract(cp):
    rng = np.random.default_rng(cp)
    for draw in range(15):
        t = cp * int(rng.integers(1, 9))
        ids = cc.random_documents_row(rng, t, int(rng.integers(1, min(t, 6) + 1)))
        prob, lay = cc.problem(ids, mask=str(rng.choice(MASK_KINDS))), cc.layout(cp)
        for rank in range(cp):
            cc.assert_metadata_equal(ring_flash_attn_cp.Llama3().cp_rank_metadata(lay, prob, rank, 0),
                                     cc.rank_metadata(lay, prob, rank), f"{ids} rank {rank}")


# ---- Zigzag: the ring's kernel calls, step by step


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8])
def test_zigzag_holds_the_head_tail_permutation_and_each_steps_metadata(cp):
    from attn_oracle.domain import CAUSAL_KINDS

    rng = np.random.default_rng(10 + cp)
    for draw in range(6):
        ids = cc.random_spans_rows(rng, 1, cp, spans=int(rng.integers(1, 5)), padding=False)
        prob = cc.problem(ids, mask=str(rng.choice(CAUSAL_KINDS)))
        lay = cc.layout(cp, strategy="ring", balance="head_tail")
        assert np.array_equal(ring_flash_attn_cp.Zigzag().cp_permutation(lay, prob), cc.permutation(lay, prob)), ids
        for rank in range(cp):
            for step in range(cp):
                cc.assert_metadata_equal(ring_flash_attn_cp.Zigzag().cp_rank_metadata(lay, prob, rank, step),
                                         cc.rank_metadata(lay, prob, rank, step), f"{ids} rank {rank} step {step}")


def test_zigzag_runs_one_kernel_call_a_step_causal_at_step_0_only():
    calls = ring_flash_attn_cp.zigzag_kernel_calls(np.array([1] * 8 + [2] * 16), 4, 2)
    assert [c["causal"] for c in calls] == [True, False, False, False]
    assert [len(c["q"]) for c in calls] == [6, 6, 6, 3]  # steps 1, 2 <= rank: every query; step 3: the back halves
    assert [len(c["k"]) for c in calls] == [6, 3, 3, 6]


def test_zigzag_refuses_a_mask_without_the_causal_term_so_the_domain_is_the_causal_kinds():
    import torch

    from ring_flash_attn import zigzag_ring_flash_attn_varlen as zz

    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(AssertionError, match="meaningless for causal=False"):
        zz.zigzag_ring_flash_attn_varlen_forward(None, torch.zeros(4, 1, 1), torch.zeros(4, 1, 1), torch.zeros(4, 1, 1),
                                                 cu, 4, slice(None, 2), slice(2, None), 1.0, causal=False)
    assert all("causal" in k for k in ring_flash_attn_cp.Zigzag.domain.mask_kinds)


def test_zigzag_calls_flash_attns_kernel_which_is_stood_in_where_flash_attn_is_absent():
    from ring_flash_attn import zigzag_ring_flash_attn_varlen as zz

    try:
        import flash_attn  # noqa: F401
        pytest.skip("flash-attn imports here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="CUDA GPU"):  # the kernel the package calls: flash-attn's, stood in
        zz._flash_attn_varlen_forward()


# ---- the ranks run whole, on threads (torch's FA2 kernel; on a CPU, flash_varlen_standin.py's)


@pytest.mark.parametrize("target", ["Llama3", "Zigzag"])
def test_check_judges_every_run_and_ring_step_forward_and_backward_on_the_standin(tmp_path, target):
    done, results = check(tmp_path, f"standin_ring_flash_attn:{target}", "--filter", "context_parallel/r",
                          "--cases", "40")
    assert done.returncode == 0, done.stdout + done.stderr
    for prop in ("context_parallel/runMatchesTheUnshardedReference", "context_parallel/ringStepsMergeToTheReference"):
        assert results[prop]["verdict"] == "passed" and results[prop]["draws"]["judged"] == 40, results[prop]


def test_the_planted_ring_turned_backwards_is_caught_and_shrunk_small(tmp_path):
    done, results = check(tmp_path, "standin_ring_flash_attn:ZigzagRingTurnedBackwards", "--filter",
                          "context_parallel/r", "--cases", "40")
    assert failed(results) == {"context_parallel/runMatchesTheUnshardedReference",
                               "context_parallel/ringStepsMergeToTheReference"}, done.stdout
    case = counterexample(done, "context_parallel/ringStepsMergeToTheReference")
    assert len(case["q"]["segment_ids"][0]) <= 8 and case["cp"]["size"] <= 3, case


def test_in_fp32_the_packages_backward_adds_its_own_buffer_so_the_domain_is_fa2s_half_types():
    """Outside FA2's dtypes, not a bug: ``dq = dq_buffer.to(torch.float32)`` is the buffer itself in fp32,
    which step 1's kernel call overwrites before ``dq += dq_buffer`` adds it again."""
    import dataclasses
    from types import SimpleNamespace

    import standin_ring_flash_attn as standin

    rng = np.random.default_rng(0)
    lay = cc.layout(2, "ring", "head_tail")
    x = SimpleNamespace(**{n: rng.standard_normal((1, 4, 1, 4)) for n in ("q", "k", "v", "do")})
    ids, pos = np.ones((1, 4), np.int64), np.arange(4)[None]
    got = {}
    for dtype in ("fp16", "fp32"):
        want = oracle.attention(x.q, x.k, x.v, do=x.do, q_segment_ids=ids, q_segment_pos=pos, mask="causal",
                                max_segments=1, dtype=dtype)
        prob = dataclasses.replace(cc.problem(ids, backward=True, heads=(1, 1)), dtype=dtype)
        out = standin.Zigzag()._run(lay, prob, x)  # cp_attention, whichever import registered the kernel first
        row_order = np.argsort(standin.Zigzag().cp_permutation(lay, prob)[0])
        got[dtype] = np.abs(out["dq"][:, row_order] - want.dq).max()
    assert got["fp16"] < 1e-2 and got["fp32"] > 1e-2, got
    assert set(ring_flash_attn_cp.Zigzag.domain.dtypes) == {"fp16", "bf16"}


# ---- invalid layouts


def test_llama3s_assertion_gives_cp_not_divisible():
    from attn_oracle.errors import AttnOracleError

    with pytest.raises(AttnOracleError) as e:
        ring_flash_attn_cp.Llama3().validate_cp_layout(cc.layout(2), cc.problem([[1] * 5]))
    assert e.value.code == "cp_not_divisible"
    with pytest.raises(AttnOracleError, match="cp_not_divisible"):
        ring_flash_attn_cp.Llama3().cp_rank_metadata(cc.layout(2), cc.problem([[1] * 5]), 0, 0)


def test_zigzag_checks_nothing_and_divides_a_document_off_2cp_silently():
    ids = np.array([1] * 6 + [2] * 2)  # a document of 6 at cp 2: the contract's cp_document_not_divisible
    lay = cc.layout(2, strategy="ring", balance="head_tail")
    assert ring_flash_attn_cp.Zigzag().validate_cp_layout(lay, cc.problem([ids.tolist()])) is None
    calls = ring_flash_attn_cp.zigzag_kernel_calls(ids, 2, 0)  # runs: cu_seqlens // 2 = [0, 3, 4]
    assert calls[0]["cu_seqlens_q"].tolist() == [0, 3, 4]
