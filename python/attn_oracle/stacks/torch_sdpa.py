"""PyTorch ``scaled_dot_product_attention`` with one backend forced at a time, on padded rows
and on jagged (nested) documents.

``python -m attn_oracle check attn_oracle.stacks.torch_sdpa:CLASS`` (a CUDA device for the
flash, efficient and cuDNN backends; the ``Math*`` classes run anywhere):

=================  =========================================================================
EfficientPadded    ``sdpa_kernel(EFFICIENT_ATTENTION)``, the batch's rows as they are
                   (``[R, H, T, D]``) with a boolean ``attn_mask``
CudnnPadded        the same under ``sdpa_kernel(CUDNN_ATTENTION)``
MathPadded         the same under ``sdpa_kernel(MATH)`` (CPU too)
FlashJagged        ``sdpa_kernel(FLASH_ATTENTION)`` on nested tensors of jagged layout
                   (``torch.nested.nested_tensor_from_jagged``), one sequence per document
EfficientJagged    the same under ``EFFICIENT_ATTENTION``
CudnnJagged        the same under ``CUDNN_ATTENTION``
MathJagged         the same under ``MATH`` (CPU too)
=================  =========================================================================

Padded: the mask is the document rule in torch, the flex module's ``mask_mod``
(attn_oracle.stacks.torch_flex) evaluated on every (query, key) pair, so every
input the suite draws is taken. Flash takes no ``attn_mask`` on CUDA, so it has
no padded class (python/tests/test_stack_torch_sdpa.py shows the refusal there).

Jagged: the documents go out through the project's cuDNN adapter
(``attn_oracle.adapters.cudnn_from_batch``: one sequence per document with valid
tokens, trimmed), each side a nested tensor ``[N, j, H, D]`` transposed to
``[N, H, j, D]``. Nested SDPA takes no mask but ``is_causal``, which SDPA
documents as top-left ("upper left"): our causal kinds go out as
``is_causal=True`` where the adapter's band is causal with the top-left diagonal
(or every sequence is as long on both sides, where the two diagonals agree).

Conventions mapped:

- SDPA returns no lse (``outputs = ("gradients",)``).
- A query with no key: SDPA's answer over an all-False mask row depends on the
  release and device (NaN or 0; docs/python.md). As the repository's torch
  example does, such a query is let attend every key and its output is zeroed
  (which zeroes what flows back through it); on jagged inputs no query is
  without keys except in a sequence with no key, which stays out of the call
  (its queries get o = 0).
- GQA: ``enable_gqa=True`` on padded rows; nested SDPA takes no ``enable_gqa``
  on every backend, so there the key heads are repeated (from fp32 leaves, so
  that autograd sums their gradients in fp32).

Declined, with the reason:

- what the backend refuses: the call raises "No available kernel" (torch's own
  checks, ``can_use_*_attention``) and the module declines with torch's words,
  its warnings included; the domains keep dtypes and head dims inside what each
  backend takes, so few draws land there;
- jagged: the domain says positions from 0, no window and the kinds without a
  bottom-right term (nested SDPA reads documents by index and takes
  ``is_causal`` alone, documented top-left; our bottom-right kinds equal the
  top-left ones on equal sides, which those draw); inside it, a causal band the
  adapter anchors bottom-right on unequal sides, what the cuDNN convention
  cannot say, a batch the suite rejects. ``MathJagged`` takes no causal kind:
  the math backend refuses ``is_causal`` on nested tensors.
"""

from __future__ import annotations

import warnings

import numpy as np

from attn_oracle import adapters
from attn_oracle.errors import AttnOracleError, Unsupported
from attn_oracle.stacks import require
from attn_oracle.stacks import torch_flex
from attn_oracle.worker import Domain

STACK, CHECKED = "PyTorch SDPA", ("2.15", "2.11")
torch = require(STACK, "torch", "torch", checked=CHECKED)
attention = require(STACK, "torch.nn.attention", "torch", checked=CHECKED)
F = torch.nn.functional

__all__ = ["EfficientPadded", "CudnnPadded", "MathPadded", "FlashJagged", "EfficientJagged", "CudnnJagged",
           "MathJagged"]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
REFUSED = ("No available kernel", "No viable backend")  # how SDPA says that no enabled backend takes the call


class _Sdpa:
    backend = "math"
    version = torch.__version__
    device = torch_flex.Backend.device
    outputs = ("gradients",)

    def sdpa(self, q, k, v, **kwargs):
        """SDPA under sdpa_kernel(this backend); torch's refusal becomes a decline in its words."""
        with warnings.catch_warnings(record=True) as said, attention.sdpa_kernel(getattr(attention.SDPBackend,
                                                                                         BACKENDS[self.backend])):
            warnings.simplefilter("always")
            try:
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
            except RuntimeError as e:
                if not str(e).startswith(REFUSED):
                    raise
                why = "; ".join(dict.fromkeys(str(w.message).splitlines()[0] for w in said))
                raise Unsupported(f"SDPA's {self.backend} backend refuses: {str(e).splitlines()[0]}"
                                  f"{' (' + why + ')' if why else ''}") from None

    def unsupported_attention(self, problem):
        return None if problem.dtype in DTYPES else f"dtype {problem.dtype}"

    def leaf(self, a, dtype, grad):
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device, dtype).requires_grad_(grad)


class _Padded(_Sdpa):
    """The batch's rows, heads first, with the document mask as a boolean attn_mask."""

    token_level_mask = True  # the mask is the token-level rule itself, every pair
    rule = torch_flex.Backend()  # the document rule in torch's words: its mask_mod, on every pair

    def attn_mask(self, keep, attends):
        """SDPA's boolean attn_mask (True: attends); a query with no key attends every key (its o is zeroed)."""
        return keep | ~attends

    def attention(self, problem, inputs):
        reason = self.unsupported_attention(problem)
        if reason:
            raise Unsupported(reason)
        keep = self.rule.dense_mask(problem.batch)[:, None]  # [R, 1, Tq, Tkv]
        attends = keep.any(-1, keepdim=True)
        dtype, grad = DTYPES[problem.dtype], problem.backward
        q, k, v = (self.leaf(a.transpose(0, 2, 1, 3), dtype, grad) for a in (inputs.q, inputs.k, inputs.v))
        o = self.sdpa(q, k, v, attn_mask=self.attn_mask(keep, attends), scale=problem.effective_scale,
                      enable_gqa=problem.heads_q != problem.heads_kv) * attends
        out = {"o": _numpy(o.transpose(1, 2))}
        if grad:
            o.backward(self.leaf(inputs.do.transpose(0, 2, 1, 3), dtype, False))
            out.update(dq=_numpy(q.grad.transpose(1, 2)), dk=_numpy(k.grad.transpose(1, 2)),
                       dv=_numpy(v.grad.transpose(1, 2)))
        return out


def jagged_layout(batch) -> dict:
    """The cuDNN adapter's sequences with is_causal, or Unsupported."""
    try:
        call = adapters.cudnn_from_batch({
            "q_segment_ids": batch.q_segment_ids, "q_segment_pos": batch.q_segment_pos,
            "kv_segment_ids": batch.kv_segment_ids, "kv_segment_pos": batch.kv_segment_pos,
            "mask": batch.mask, "window": tuple(batch.window), "max_segments": batch.max_segments})
    except AttnOracleError as e:
        if e.code == "unsupported":
            raise Unsupported(f"the sequence convention cannot say this batch: {e.message}") from None
        raise Unsupported(f"not a valid batch ({e.code}): SDPA validates no ids, so it is not judged") from None
    q_len, kv_len = np.asarray(call["seq_len_q"], np.int64), np.asarray(call["seq_len_kv"], np.int64)
    left, right = call["left_bound"], call["right_bound"]
    if left is not None or right not in (None, 0):
        raise Unsupported(f"a window (bounds {left}, {right}): nested SDPA takes no mask but is_causal")
    causal = right == 0
    if causal and call["diagonal_alignment"] == "bottom_right" and (q_len != kv_len).any():
        raise Unsupported("a causal band anchored bottom-right on a sequence of unequal sides: SDPA's is_causal is "
                          "top-left")
    def tokens(offsets, lengths):
        return np.concatenate([np.arange(o, o + n) for o, n in zip(offsets, lengths)] or [np.zeros(0)]).astype(np.int64)
    return {"q_len": q_len, "kv_len": kv_len, "causal": causal,
            "q_tokens": tokens(call["ragged_offset_q"][:-1], q_len), "kv_tokens": tokens(call["ragged_offset_kv"][:-1], kv_len)}


class _Jagged(_Sdpa):
    """One sequence per document, as nested tensors of jagged layout."""

    def layout(self, batch):
        return jagged_layout(batch)

    def attention(self, problem, inputs):
        reason = self.unsupported_attention(problem)
        if reason:
            raise Unsupported(reason)
        layout = self.layout(problem.batch)
        keep = layout["kv_len"] > 0  # a sequence with no key stays out: its queries attend nothing
        q_tok = np.concatenate([t for t, ok in zip(np.split(layout["q_tokens"], np.cumsum(layout["q_len"])[:-1]), keep)
                                if ok] or [np.zeros(0, np.int64)])
        kv_tok = layout["kv_tokens"]
        dtype, grad = DTYPES[problem.dtype], problem.backward
        r, tq, hq, d = inputs.q.shape
        groups = problem.heads_q // problem.heads_kv
        flat = lambda a: a.reshape(-1, a.shape[2], a.shape[3])  # noqa: E731
        q = self.leaf(flat(inputs.q)[q_tok], dtype, grad)
        kv_dtype = torch.float32 if groups > 1 else dtype  # repeated heads: their gradients summed in fp32
        k, v = self.leaf(flat(inputs.k)[kv_tok], kv_dtype, grad), self.leaf(flat(inputs.v)[kv_tok], kv_dtype, grad)
        out = {name: np.zeros(a.shape) for name, a in (("o", inputs.q),)}
        if len(q_tok):
            def nested(x, lengths):
                offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)])).to(self.device)
                return torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2)
            kc, vc = (k, v) if groups == 1 else (x.repeat_interleave(groups, 1).to(dtype) for x in (k, v))
            o = self.sdpa(nested(q, layout["q_len"][keep]), nested(kc, layout["kv_len"][keep]),
                          nested(vc, layout["kv_len"][keep]), is_causal=layout["causal"], scale=problem.effective_scale)
            o = o.transpose(1, 2).values()  # [total_q, H, D]
            full = np.zeros((r * tq, hq, d))
            full[q_tok] = _numpy(o)
            out["o"] = full.reshape(inputs.q.shape)
            if grad:
                o.backward(self.leaf(flat(inputs.do)[q_tok], dtype, False))
        if grad:
            for name, leaf, tokens, side in (("dq", q, q_tok, inputs.q), ("dk", k, kv_tok, inputs.k),
                                             ("dv", v, kv_tok, inputs.v)):
                full = np.zeros((side.shape[0] * side.shape[1],) + side.shape[2:])
                if leaf.grad is not None:
                    full[tokens] = _numpy(leaf.grad)
                out[name] = full.reshape(side.shape)
        return out


def _numpy(t):
    return t.detach().to("cpu", torch.float64).numpy()


HALF = ("fp16", "bf16")
TILE_HEAD_DIMS = (8, 16, 32, 64, 128)
# Nested SDPA reads a document by index and takes is_causal alone, top-left: positions from 0,
# no window, the kinds without a bottom-right term (on equal sides they are the same masks).
JAGGED = dict(positions_from_zero=True, windows=False, mask_kinds=("no_mask", "padding", "causal", "padding_causal"))


class EfficientPadded(_Padded):
    name, backend = "torch-sdpa-efficient-padded", "efficient"
    domain = Domain(head_dims=TILE_HEAD_DIMS + (256,))


class CudnnPadded(_Padded):
    name, backend = "torch-sdpa-cudnn-padded", "cudnn"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS)


class MathPadded(_Padded):
    name, backend = "torch-sdpa-math-padded", "math"


class FlashJagged(_Jagged):
    name, backend = "torch-sdpa-flash-jagged", "flash"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS + (256,), **JAGGED)


class EfficientJagged(_Jagged):
    name, backend = "torch-sdpa-efficient-jagged", "efficient"
    domain = Domain(head_dims=TILE_HEAD_DIMS + (256,), **JAGGED)


class CudnnJagged(_Jagged):
    name, backend = "torch-sdpa-cudnn-jagged", "cudnn"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS, **JAGGED)


class MathJagged(_Jagged):
    """The math backend takes no is_causal on nested tensors (torch refuses it; the CPU tests show it)."""

    name, backend = "torch-sdpa-math-jagged", "math"
    domain = Domain(**{**JAGGED, "mask_kinds": ("no_mask", "padding")})
