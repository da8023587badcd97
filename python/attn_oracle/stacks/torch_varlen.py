"""PyTorch varlen attention: ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention-2 on cu_seqlens).

``python -m attn_oracle check attn_oracle.stacks.torch_varlen:Backend`` (a CUDA device:
the kernel is FlashAttention-2's, compiled into torch for CUDA only).

The call is the public one, ``varlen_attn(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k,
return_aux=AuxRequest(lse=True), scale=..., window_size=(left, right))``, on the
packed tokens of the batch, its gradients by autograd (the library's own
backward). The batch goes out through the project's FlashAttention adapter
(``attn_oracle.adapters.flash_attention_from_batch(..., version="fa2")``,
docs/conventions.md): one sequence per document with valid tokens, trimmed to
them, in row-major order, the tokens gathered with its ``q_tokens`` /
``kv_tokens`` and the outputs scattered back (tokens left out attend nothing).

Conventions mapped (torch 2.11's and 2.15's ``varlen.py`` read):

- Causal is bottom-right per sequence (FlashAttention's), where SDPA's
  ``is_causal`` is top-left. ``varlen_attn`` has no causal flag: it sets
  ``is_causal`` when ``window_size == (-1, 0)``, and ``(W, 0)`` is the causal
  sliding window. So the adapter's ``causal=True`` with left side L goes out as
  ``window_size=(L, 0)`` (L = -1: unbounded).
- A -1 window side under FA2 reads ``max_k`` (the adapter picks ``max_k`` so
  that this says what the batch means).
- lse: 2.11's docstring gives ``(T_q, H)``; the kernel and torch's own fake
  implementation give ``(H, T_q)`` (FA2's varlen layout), which 2.15's docstring
  now says. The module reads ``(H, T_q)`` and refuses any other shape with an
  error naming it, so a release that moves to 2.11's documented layout fails
  loudly instead of being misread.
- A query that attends no key gets ``o = 0`` and lse ``+inf`` from FA2; the
  suite's lse there is ``-inf``: mapped.
- GQA: 2.11's key and value are ``(T_k, H, D)``, the query's H, so there the kv
  heads are repeated to the query's (``repeat_interleave`` from fp32 leaves, so
  that autograd sums the gradients back in fp32); a release with ``enable_gqa`` (2.15) gets the kv heads as
  they are and ``enable_gqa=True``.
- 2.15 may run cuDNN instead of FA2 on SM90/SM100 with cuDNN >= 9.18 (its own
  ``_cudnn_rejection_reasons`` choose); 2.11 always runs FA2.
- Extra dims are flattened into rows (the adapter's token axis is ``[R * T]``).

The domain: positions from 0 in every document (FlashAttention reads a
document by index from its first token), the mask kinds without a top-left
causal term (``varlen_attn``'s causal is bottom-right; our top-left causal
equals it on a document as long on both sides, which the bottom-right kinds
draw, and has no FlashAttention form on the others), fp16 and bf16, head dims
FA2 takes. Declined inside it, each with the reason:

- what the FlashAttention convention cannot say (the adapter's ``unsupported``:
  our top-left causal where it differs from bottom-right on the trimmed runs,
  positions that are not contiguous inside a document under a causal term or a
  window); the message names the row, document and query;
- a batch the suite's rules reject (varlen_attn validates no ids);
- dtypes other than fp16 and bf16, and head dims FA2 does not take (a multiple
  of 8, at most 256): the domain says both, so no draw lands there;
  ``python/tests/test_stack_torch_varlen.py`` shows the refusals on a GPU.

On a machine without CUDA the module imports, and the attention call fails
(``_flash_attention_forward`` has no CPU kernel). Its mapping is tested on the
CPU against a stand-in kernel that follows FA2's documented conventions
(python/tests/flash_varlen_standin.py: it registers a CPU kernel for
``aten::_flash_attention_forward`` / ``_backward``, so ``varlen_attn``'s own
Python, custom op and autograd run unchanged).
"""

from __future__ import annotations

import inspect

import numpy as np

from attn_oracle import adapters
from attn_oracle.domain import MASK_KINDS, is_bottom_right, is_causal
from attn_oracle.stacks import convention_call, decline, require
from attn_oracle import Domain

STACK, CHECKED = "PyTorch varlen attention", ("2.15", "2.11")
torch = require(STACK, "torch", "torch", checked=CHECKED)
varlen = require(STACK, "torch.nn.attention.varlen", "torch", checked=CHECKED)
from attn_oracle.stacks._torch_common import (  # noqa: E402
    TORCH_DTYPES, has_cuda, lse_to_rows, to_numpy, tokens_to_rows)

__all__ = ["Backend", "call_arguments", "dense", "HEAD_DIMS"]

DTYPES = {name: TORCH_DTYPES[name] for name in ("fp16", "bf16")}
HEAD_DIMS = (8, 16, 32, 64, 128, 256)  # FA2: a multiple of 8, at most 256 (drawn among these)
GQA_FLAG = "enable_gqa" in inspect.signature(varlen.varlen_attn).parameters  # 2.15 has it, 2.11 not


def call_arguments(batch) -> dict:
    """The batch as varlen_attn's arguments: cu_seq_q/k, max_q/k, window_size, and the
    gather indices q_tokens / kv_tokens (the adapter's), or Unsupported with the reason."""
    call = convention_call(adapters.flash_attention_from_batch, batch, version="fa2",
                           convention="FlashAttention's convention", unvalidated="varlen_attn validates no ids")
    left, right = (int(w) for w in call["window_size"])
    window = (left, 0) if call["causal"] else (left, right)
    return {"cu_seq_q": np.asarray(call["cu_seqlens_q"], np.int64), "cu_seq_k": np.asarray(call["cu_seqlens_k"], np.int64),
            "max_q": int(call["max_seqlen_q"]), "max_k": int(call["max_seqlen_k"]), "window_size": window,
            "q_tokens": np.asarray(call["q_tokens"], np.int64), "kv_tokens": np.asarray(call["kv_tokens"], np.int64)}


class Backend:
    """varlen_attn on the batch's packed documents: o, lse and, by autograd, dq, dk, dv."""

    name = "torch-varlen-attn"
    version = torch.__version__
    device = "cuda" if has_cuda() else "cpu"
    outputs = ("lse", "gradients")
    # FlashAttention reads a document by index from its first token, causal anchored bottom-right:
    # positions from 0 and the kinds that say the same (top-left causal equals bottom-right on
    # equal sides, and has no FlashAttention form on others). Judged 90% of its draws on the H100 (bench/results/stacks-gpu-runs.md).
    domain = Domain(dtypes=tuple(DTYPES), head_dims=HEAD_DIMS, positions_from_zero=True,
                    mask_kinds=tuple(k for k in MASK_KINDS if not is_causal(k) or is_bottom_right(k)))

    def varlen_attn(self, *args, **kwargs):
        return varlen.varlen_attn(*args, **kwargs)

    def unsupported_attention(self, problem):
        if problem.dtype not in DTYPES:
            return f"dtype {problem.dtype}: FlashAttention-2 takes fp16 and bf16"
        if problem.head_dim % 8 or problem.head_dim > 256:
            return f"head_dim {problem.head_dim}: FlashAttention-2 takes multiples of 8 up to 256"
        return None

    def lse_layout(self, lse, heads: int, total_q: int):
        """lse [H, T_q] as FA2 and torch's fake implementation give it; any other shape is an error."""
        if tuple(lse.shape) != (heads, total_q):
            raise AssertionError(f"varlen_attn's lse has shape {tuple(lse.shape)}; this module reads (H, T_q) = "
                                 f"({heads}, {total_q}) (2.11's docstring says (T_q, H): check the release)")
        return lse

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        args = call_arguments(problem.batch)
        dtype, grad, dev = DTYPES[problem.dtype], problem.backward, self.device
        r, tq, hq, d = inputs.q.shape
        tkv, hkv = inputs.k.shape[1], inputs.k.shape[2]
        q_tok, kv_tok = args["q_tokens"], args["kv_tokens"]

        groups, gqa = hq // hkv, {}
        repeat = groups > 1 and not GQA_FLAG

        def packed(a, tokens, as_dtype=dtype):  # [R, T, H, D] -> the call's [tokens, H, D], a leaf on the device
            return dense(a.reshape(-1, a.shape[2], a.shape[3])[tokens], dev, as_dtype).requires_grad_(grad)

        # Repeated key heads are summed back by autograd: in fp32, as a kernel with GQA would.
        kv_dtype = torch.float32 if repeat else dtype
        q, k, v = packed(inputs.q, q_tok), packed(inputs.k, kv_tok, kv_dtype), packed(inputs.v, kv_tok, kv_dtype)
        if groups == 1:
            k_call, v_call = k, v
        elif GQA_FLAG:
            k_call, v_call, gqa = k, v, {"enable_gqa": True}
        else:
            k_call, v_call = (x.repeat_interleave(groups, 1).to(dtype) for x in (k, v))
        ints = lambda a: torch.from_numpy(a.astype(np.int32)).to(dev)  # noqa: E731
        if len(args["cu_seq_q"]) > 1:
            o, lse = self.varlen_attn(q, k_call, v_call, ints(args["cu_seq_q"]), ints(args["cu_seq_k"]), args["max_q"],
                                      args["max_k"], return_aux=varlen.AuxRequest(lse=True),
                                      scale=problem.effective_scale, window_size=args["window_size"], **gqa)
        else:
            # No document, so no query token: varlen_attn refuses a call of no sequence ("batch size must
            # be positive"); what it would return, empty, and every query attends nothing.
            o, lse = q * 0, torch.zeros((hq, 0), device=dev)
        out = {"o": tokens_to_rows(o, q_tok, (r, tq, hq, d)),
               "lse": lse_to_rows(to_numpy(self.lse_layout(lse, hq, len(q_tok))), q_tok, r, tq)}
        if grad:
            o.backward(packed(inputs.do, q_tok).detach())
            # A leaf's grad is None when the call had no token on that side.
            out.update({name: tokens_to_rows(leaf.grad, tokens, (r, t, h, d))
                        for name, leaf, tokens, t, h in (("dq", q, q_tok, tq, hq), ("dk", k, kv_tok, tkv, hkv),
                                                         ("dv", v, kv_tok, tkv, hkv))})
        return out


def dense(a: np.ndarray, device, dtype):
    """``a`` as a row-major tensor on the device, empty ones too: numpy gives an empty gather
    strides of 0, which ``torch.from_numpy`` and ``.to`` keep, and FA2 refuses any tensor whose
    last stride is not 1 ("Input tensor must have contiguous last dimension")."""
    return torch.empty(a.shape, dtype=dtype, device=device).copy_(torch.from_numpy(np.ascontiguousarray(a)))

