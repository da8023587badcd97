"""attn_oracle.stacks.jax_cudnn, JAX's cuDNN fused attention.

On a GPU both targets run cuDNN and pass the suite (skipped here with one line).
Everywhere, the same mapping runs under JAX's own code with the stand-in of
jax_cudnn_standin.py for the cuDNN custom call (the real thing on a GPU): both
targets pass, the planted twin fails and shrinks small, and each class the
module declines is refused by JAX's own cuDNN code."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only jax_nn builds the venv)")

import jax.numpy as jnp  # noqa: E402
from jax._src.cudnn import fused_attention_stablehlo as fused  # noqa: E402
from stack_checks import documents, run_check, shrunk_case  # noqa: E402

GPU = jax.default_backend() == "gpu"
TARGETS = ["Lengths", "Packed"]


@pytest.mark.skipif(not GPU, reason=f"no GPU (JAX's backend is {jax.default_backend()}): cuDNN runs on CUDA only")
@pytest.mark.parametrize("target", TARGETS)
def test_cudnn_passes_on_the_gpu(tmp_path, target):
    done, _ = run_check(tmp_path, f"attn_oracle.stacks.jax_cudnn:{target}", "--cases", "25")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.parametrize("target", TARGETS)
def test_the_mapping_passes_on_the_standin(tmp_path, target):
    done, report = run_check(tmp_path, f"jax_cudnn_standin:{target}", "--cases", "20")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    result = next(r for r in report["results"] if r["property"] == "attention/matchesReference")
    assert result["draws"]["judged"] >= 4, result["draws"]
    # what is declined is only what cuDNN refuses or one length per row cannot say
    refusals = ("a window with a right side", "more than one document in a row", "a padding token before")
    assert all(any(r in reason for r in refusals) for reason in result.get("decline_reasons", {})), result


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_cudnn:PackedWindowInclusive", "--cases", "40",
                        "--filter", "attention/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)  # one document in one 16-token row (shape-stable draws keep the row)
    assert documents(case) == 1 and len(case["q"]["segment_ids"]) == 1, case


@pytest.mark.parametrize("twin, prop", [("LengthsWindowAsJaxNnHandsIt", "attention/matchesReference"),
                                        ("PackedGradientsAsWritten", "attention/matchesReference")])
def test_each_workaround_is_needed(tmp_path, twin, prop):
    """Without either mapping of what cuDNN did on an H100 (the stand-in does the same), the check fails."""
    done, _ = run_check(tmp_path, f"planted_jax_cudnn:{twin}", "--cases", "40", "--filter", prop)
    assert done.returncode == 1, done.stdout[-4000:]


def _qkv(dtype, head_dim=8):
    q = jnp.ones((1, 16, 2, head_dim), dtype)
    return q, jnp.ones((1, 16, 1, head_dim), dtype), jnp.ones((1, 16, 1, head_dim), dtype)


def test_fp32_is_refused_by_jax():
    with pytest.raises(NotImplementedError, match="fp16/bf16"):
        fused.check_layout(*_qkv(jnp.float32), None, None, None, None, None, None, None, fused.AttentionLayout.BTNH)
    fused.check_layout(*_qkv(jnp.bfloat16), None, None, None, None, None, None, None, fused.AttentionLayout.BTNH)


@pytest.mark.parametrize("head_dim", [12, 264])
def test_head_dims_off_the_domain_are_refused_by_jax(head_dim):
    with pytest.raises(NotImplementedError, match="multiple of 8"):
        fused.check_is_flash_attention(*_qkv(jnp.bfloat16, head_dim), fused.AttentionLayout.BTNH.value, 91900, False,
                                       False)
    for taken in (8, 64, 128):
        fused.check_is_flash_attention(*_qkv(jnp.bfloat16, taken), fused.AttentionLayout.BTNH.value, 91900, False,
                                       False)


def test_a_right_window_without_a_causal_term_is_refused_by_jax():
    q, k, v = _qkv(jnp.bfloat16)
    lengths = jnp.full((1,), 16, jnp.int32)
    with pytest.raises(ValueError, match="right window"):
        jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                     local_window_size=(2, 1), implementation="cudnn")


def test_the_domain_and_the_declines_are_those():
    from jax_cudnn_standin import Lengths, Packed, jax_cudnn
    from attn_oracle.worker import Batch, Problem

    for backend in (Lengths(), Packed()):
        assert backend.domain.dtypes == ("fp16", "bf16")
        assert all(d % 8 == 0 and d <= 128 for d in backend.domain.head_dims)
        assert "bottom_right" not in " ".join(backend.domain.mask_kinds)
    ids = np.ones((1, 4), np.int64)
    batch = Batch(ids, np.arange(4)[None], ids, np.arange(4)[None], "padding", (2, 1), 1)
    p = Problem(batch, 2, 1, 8, None, "bf16", False)
    assert "right side" in Packed().unsupported_attention(p)
    p.batch.mask = "padding_causal"  # the right side is moot under a causal term
    assert Packed().unsupported_attention(p) is None
    assert jax_cudnn.cudnn_window((3, 0), False) == (True, 4) and jax_cudnn.cudnn_window((-1, 0), False) == (True, None)
    assert jax_cudnn.cudnn_window((3, 0), False, right_by_causal=False) == (False, 4)
