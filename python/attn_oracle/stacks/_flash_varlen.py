"""flash-attn's two varlen kernel entry points (``flash_attn.flash_attn_interface.
_flash_attn_varlen_forward`` / ``_flash_attn_varlen_backward``, the FA2 signature stack code
calls by keyword) over torch's own FlashAttention-2 kernels (``aten::_flash_attention_forward`` /
``_backward``, the varlen FA2 code torch ships), for stack code written against flash-attn
where flash-attn is absent. torch builds the kernels for CUDA; python/tests/flash_varlen_standin.py
registers a CPU one for the tests.

The contract (FA2's): q [total_q, Hq, D], k and v [total_k, Hkv, D] (Hkv divides Hq),
sequence j the rows ``cu_seqlens_q[j]:cu_seqlens_q[j+1]`` against ``cu_seqlens_k[j]:...``;
``causal`` aligned bottom-right (query i of a sequence with lq queries and lk keys sees keys up
to ``i + lk - lq``), the window likewise (-1: unbounded); forward returns ``(out, lse, None,
rng_state)`` with lse [Hq, total_q] float32, +inf where a query sees no key (its out 0); backward
writes dq, dk, dv into the buffers it is given, from the ``out`` and ``lse`` of the *whole*
attention the block is part of (as a ring's backward passes them).
"""

from __future__ import annotations

import torch

__all__ = ["torch_flash", "has_kernel"]


def has_kernel(device: str) -> bool:
    """Whether torch's FA2 forward has a kernel for ``device`` ("cuda", "cpu") in this process."""
    key = {"cuda": "CUDA", "cpu": "CPU"}[device]
    return (device != "cuda" or torch.cuda.is_available()) and torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_flash_attention_forward", key)


def torch_flash():
    """(forward, backward) over torch's FA2 ops; CUDA, fp16 / bf16, head dims up to 256."""

    def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                causal=False, window_size_left=-1, window_size_right=-1, softcap=0.0, alibi_slopes=None,
                return_softmax=False, block_table=None):
        _no_extras(dropout_p, softcap, alibi_slopes, block_table)
        out, lse, rng, unused, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), 0.0, bool(causal), False,
            scale=softmax_scale, window_size_left=int(window_size_left), window_size_right=int(window_size_right))
        return out, lse, None, (rng, unused)

    def backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False, window_size_left=-1,
                 window_size_right=-1, softcap=0.0, alibi_slopes=None, deterministic=False, rng_state=None):
        _no_extras(dropout_p, softcap, alibi_slopes, None)
        empty = torch.empty((), dtype=torch.int64, device=q.device)  # no dropout: the RNG state is unread
        grads = torch.ops.aten._flash_attention_backward(
            dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), 0.0,
            bool(causal), empty, empty, scale=softmax_scale, window_size_left=int(window_size_left),
            window_size_right=int(window_size_right))
        for buffer, grad in zip((dq, dk, dv), grads):
            buffer.copy_(grad)
        return dq, dk, dv

    return forward, backward


def _no_extras(dropout_p, softcap, alibi_slopes, block_table) -> None:
    if dropout_p or softcap or alibi_slopes is not None or block_table is not None:
        raise NotImplementedError("dropout, softcap, ALiBi and paged K/V are outside what the suite checks")
