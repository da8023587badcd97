"""attn_oracle.stacks.torch_sdpa's fused padded classes on the CPU: their mapping (key heads
repeated where the backend takes no GQA, a side shorter than the backend takes padded with
masked tokens) over the math backend, which runs here, so that ``check`` judges it."""
from attn_oracle.stacks import torch_sdpa


class PaddedAsFused(torch_sdpa.MathPadded):
    name = "torch-sdpa-math-padded-as-fused-cpu-standin"
    enable_gqa = torch_sdpa.EfficientPadded.enable_gqa
    min_q, min_kv = torch_sdpa.CudnnPadded.min_q, torch_sdpa.CudnnPadded.min_kv
