"""attn_oracle.stacks.torch_sdpa's fused padded classes on the CPU: their mapping (key heads
repeated where the backend takes no GQA, a side shorter than the backend takes padded with
masked tokens) over the math backend, which runs here, so that ``check`` judges it."""
from attn_oracle.stacks import torch_sdpa


class PaddedAsFused(torch_sdpa.MathPadded):
    name = "torch-sdpa-math-padded-as-fused-cpu-standin"
    enable_gqa = torch_sdpa.EfficientPadded.enable_gqa
    min_q, min_kv = torch_sdpa.CudnnPadded.min_q, torch_sdpa.CudnnPadded.min_kv


class OneKeyTwice(torch_sdpa.MathJagged):
    """MathJagged with CudnnJagged's mapping of a sequence with one key (sent with it twice)."""

    name = "torch-sdpa-math-jagged-one-key-twice-cpu-standin"
    key_rows = torch_sdpa.CudnnJagged.key_rows


class FlashJagged(torch_sdpa.FlashJagged):
    """FlashJagged on the CPU: torch's own nested SDPA for the flash backend (its Python in
    ``torch/nested/_internal/sdpa.py``: the preprocessing, then ``aten::_flash_attention_forward``
    with ``is_causal`` as it is) over the FlashAttention-2 stand-in kernel
    (flash_varlen_standin.py). Only the backend choice is made here: torch chooses flash on a
    CUDA device only. Forward only."""

    name = "torch-sdpa-flash-jagged-cpu-standin"
    device = "cpu"
    outputs = ()

    def sdpa(self, q, k, v, **kwargs):
        import flash_varlen_standin  # noqa: F401 - registers the CPU kernel the flash path calls
        from torch.nested._internal import sdpa as nested

        chosen = nested._select_sdp_backend
        nested._select_sdp_backend = lambda *args: torch_sdpa.SDPBackend.FLASH_ATTENTION
        try:
            return torch_sdpa.F.scaled_dot_product_attention(q, k, v, **kwargs)
        finally:
            nested._select_sdp_backend = chosen
