"""attn_oracle.stacks.xformers_attention on the CPU: the Flash class as it is, with xformers'
own flash operator (its bias-to-cu_seqlens translation, its custom ops, its autograd) run
on CPU tensors over the FlashAttention-2 stand-in kernel (python/tests/flash_varlen_standin.py).

Changed here and only here: the flash operators' ``not_supported_reasons`` drop what
they say of the CPU itself (not a CUDA device; bf16 "only supported on A100+ GPUs"),
and xformers' ``xformers_flash::flash_fwd`` / ``flash_bwd`` custom ops, registered for
CUDA only, get their own Python bodies as CPU kernels (those bodies call
``aten::_flash_attention_forward`` / ``_backward``, which the stand-in serves).
"""
import flash_varlen_standin  # noqa: F401 - the CPU kernel the operator's body calls

from attn_oracle.stacks import xformers_attention

flash = xformers_attention.fmha.flash


def _without_the_cpu(reasons_of):
    def not_supported_reasons(d):
        return [r for r in reasons_of(d) if "device=cpu" not in r and "GPU" not in r]
    return classmethod(lambda cls, d: not_supported_reasons(d))


for _op in (flash.FwOp, flash.BwOp):
    _op.not_supported_reasons = _without_the_cpu(_op.not_supported_reasons)
for _custom in (flash._flash_fwd, flash._flash_bwd):
    _custom.register_kernel("cpu")(_custom._init_fn)


class Flash(xformers_attention.Flash):
    name = "xformers-flash-cpu-standin"
    device = "cpu"
