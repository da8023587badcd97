"""A CPU stand-in for cuDNN's fused attention custom call, under JAX's own code.

JAX's cuDNN path is Python down to two primitives that lower to cuDNN custom
calls on CUDA only (``jax._src.cudnn.fused_attention_stablehlo``). On a CPU
backend, :func:`install` registers a CPU lowering for both (forward and
backward) that computes what the custom call is documented to compute, from
exactly the operands the CUDA lowering hands cuDNN: everything before it
(jax.nn's argument mapping, the packed path's compaction of seqlens and
offsets, the shapes checks) is JAX's own code. It also answers JAX's two
device questions as a Hopper GPU with cuDNN 9.19 would.

The custom call's contract, as the CUDA lowering and jax's docstrings give it:

- seqlens are operands only under a padding mask or with several segments per
  row (M > 1); offsets only with M > 1. Otherwise every row is one sequence of
  T (S) tokens.
- with M > 1: seqlens ``[B, M]`` compacted in row-major order (valid ones
  first, then 0), offsets ``[B, M+1]`` likewise, in elements of the flattened ``[B*T, N, H]`` tensor, compacted
  (then filled with B*T*N*H); sequence s is q tokens ``offsets[s] / (N*H)``
  onwards, ``seqlen[s]`` of them, paired with kv sequence s.
- the causal term is top-left on the index within a sequence; a sliding window
  W keeps keys j with ``j > i - W``, and ``j <= i`` only under a causal mask
  type: what cuDNN did on an H100 (jax 0.11.2, cuDNN 9.19), not what JAX's
  docstrings say (``(pos - W, pos]`` whatever the mask type);
  fixtures/stacks/jax_cudnn_window_without_causal_attends_right.case.json.
- softmax statistics ``[B*M, N, T]`` (float32): sequence, head, index within.
  What cuDNN leaves unwritten (a query outside every sequence, statistics past
  a sequence's length) the stand-in fills with NaN, so nothing may read it; so
  too the gradients of a token outside every sequence and of a key no query
  attends (on the H100 they were NaN or a different number on each call).

Backward: the vjp of the same forward. The backends at the bottom are the
module's classes, imported after the stand-in is in place (check targets for CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.cudnn import fused_attention_stablehlo as fused
from jax._src.interpreters import mlir

CUDNN_VERSION = 91900


def _sequences(seqlen, offsets, rows, t, stride, m, padding):
    """(start token, length) per sequence on the flattened rows*t tokens."""
    if m > 1:  # both keep their [B, M] and [B, M+1] shapes, compacted in row-major order
        return offsets.reshape(-1)[: rows * m] // stride, jnp.maximum(seqlen.reshape(-1), 0)
    starts = jnp.arange(rows) * t
    return starts, (seqlen.reshape(rows) if padding else jnp.full((rows,), t))


def _membership(starts, lengths, n):
    """(sequence of each token or -1, index within it) over n tokens."""
    tok = jnp.arange(n)
    inside = (tok[None, :] >= starts[:, None]) & (tok[None, :] < (starts + lengths)[:, None])
    seq = jnp.where(inside.any(0), jnp.argmax(inside, 0), -1)
    return seq, tok - jnp.where(seq >= 0, starts[jnp.maximum(seq, 0)], 0)


def _attention(q, k, v, q_seqlen, kv_seqlen, q_offsets, kv_offsets, *, scale, mask_type, window, m):
    b, t, n, h = q.shape
    _, s, kh, _ = k.shape
    padding = fused.has_padding(fused.MaskType(mask_type) if isinstance(mask_type, int) else mask_type)
    causal = mask_type in (fused.MaskType.CAUSAL, fused.MaskType.PADDING_CAUSAL)
    q_starts, q_lens = _sequences(q_seqlen, q_offsets, b, t, n * h, m, padding)
    kv_starts, kv_lens = _sequences(kv_seqlen, kv_offsets, b, s, kh * h, m, padding)
    q_seq, q_idx = _membership(q_starts, q_lens, b * t)
    kv_seq, kv_idx = _membership(kv_starts, kv_lens, b * s)
    allowed = (q_seq[:, None] == kv_seq[None, :]) & (q_seq[:, None] >= 0)
    if causal:
        allowed &= kv_idx[None, :] <= q_idx[:, None]
    if window is not None:
        allowed &= kv_idx[None, :] > q_idx[:, None] - window
    qf = q.reshape(b * t, n, h).astype(jnp.float32)
    kf = jnp.repeat(k.reshape(b * s, kh, h), n // kh, axis=1).astype(jnp.float32)
    vf = jnp.repeat(v.reshape(b * s, kh, h), n // kh, axis=1).astype(jnp.float32)
    logits = jnp.einsum("tnh,snh->nts", qf, kf) * scale
    logits = jnp.where(allowed[None], logits, -jnp.inf)
    attends = allowed.any(1)  # [B*T]
    top = jnp.where(attends[None, :, None], logits.max(-1, keepdims=True), 0.0)
    weights = jnp.exp(logits - top)
    total = weights.sum(-1, keepdims=True)
    o = jnp.einsum("nts,snh->tnh", weights / jnp.where(total > 0, total, 1.0), vf)
    lse = (top + jnp.log(jnp.where(total > 0, total, 1.0)))[..., 0]  # [N, B*T]
    return o, lse, (q_seq, q_idx, q_starts, q_lens, attends, allowed.any(0))


def _forward(q, k, v, bias, q_seqlen, kv_seqlen, q_offsets, kv_offsets, *rest, scale, mask_type,
             sliding_window_length, is_training, **_):
    b, t, n, h = q.shape
    m = fused.get_max_seg_per_batch(q_offsets)
    o, lse, (q_seq, q_idx, q_starts, q_lens, *_) = _attention(
        q, k, v, q_seqlen, kv_seqlen, q_offsets, kv_offsets, scale=scale, mask_type=mask_type,
        window=sliding_window_length, m=m)
    o = jnp.where((q_seq >= 0)[:, None, None], o, jnp.nan).reshape(b, t, n, h).astype(q.dtype)
    if not is_training:
        return [o]
    # statistics [B*M, N, T]: sequence, head, index within it
    seqs = b * m
    at = jnp.clip(q_starts[:seqs, None] + jnp.arange(t)[None, :], 0, b * t - 1)  # [B*M, T] token of each entry
    written = jnp.arange(t)[None, :] < q_lens[:seqs, None]
    stats = jnp.where(written[:, None, :], jnp.transpose(lse[:, at], (1, 0, 2)), jnp.nan)
    return [o, stats.astype(jnp.float32)]


def _backward(q, k, v, bias, q_seqlen, kv_seqlen, q_offsets, kv_offsets, page_table_k, page_table_v, activation,
              fwd_output, grad_output, *rest, scale, mask_type, sliding_window_length, variadic_args, **_):
    m = fused.get_max_seg_per_batch(q_offsets)

    def out(q, k, v):
        o, _, (q_seq, *_) = _attention(q, k, v, q_seqlen, kv_seqlen, q_offsets, kv_offsets, scale=scale,
                                       mask_type=mask_type, window=sliding_window_length, m=m)
        return jnp.where((q_seq >= 0)[:, None, None], o, 0.0).reshape(q.shape)

    _, pullback = jax.vjp(out, q, k, v)
    grad = jnp.where(jnp.isnan(grad_output), 0, grad_output).astype(jnp.float32)
    *_, attends, attended = _attention(q, k, v, q_seqlen, kv_seqlen, q_offsets, kv_offsets, scale=scale,
                                       mask_type=mask_type, window=sliding_window_length, m=m)[2]
    written = (attends.reshape(q.shape[:2]), attended.reshape(k.shape[:2]), attended.reshape(v.shape[:2]))
    grads = [jnp.where(w[:, :, None, None], g, jnp.nan).astype(x.dtype)
             for g, x, w in zip(pullback(grad), (q, k, v), written)]
    return grads + ([jnp.zeros_like(bias)] if variadic_args[1] else [])


def install() -> bool:
    """Put the stand-in under JAX's cuDNN path on a CPU backend; False (nothing done) where a GPU is."""
    if jax.default_backend() != "cpu":
        return False
    fused.check_cudnn_version = lambda: CUDNN_VERSION
    fused.check_compute_capability = lambda capability: True  # a Hopper GPU (9.0)
    fused.is_cuda_compute_capability_equal = lambda capability: False
    mlir.register_lowering(fused._dot_product_attention_fwd_p, mlir.lower_fun(_forward, multiple_results=True),
                           platform="cpu")
    mlir.register_lowering(fused._dot_product_attention_bwd_p, mlir.lower_fun(_backward, multiple_results=True),
                           platform="cpu")
    return True


STANDIN = install()

from attn_oracle.stacks import jax_cudnn  # noqa: E402  (after the stand-in: its import asks for cuDNN)


class Lengths(jax_cudnn.Lengths):
    name = "jax-cudnn-seq-lengths" + ("-cpu-standin" if STANDIN else "")


class Packed(jax_cudnn.Packed):
    name = "jax-cudnn-packed" + ("-cpu-standin" if STANDIN else "")
