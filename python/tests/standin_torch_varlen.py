"""attn_oracle.stacks.torch_varlen on the CPU: the module as it is, with FlashAttention-2's
kernel replaced by python/tests/flash_varlen_standin.py (registered for CPU tensors), so
that ``check`` judges the mapping here. On a GPU the module itself is the target."""
import flash_varlen_standin  # noqa: F401 - registers the CPU kernel varlen_attn calls

from attn_oracle.stacks import torch_varlen


class Backend(torch_varlen.Backend):
    name = "torch-varlen-attn-cpu-standin"
    device = "cpu"
