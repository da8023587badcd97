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
- GQA: ``enable_gqa=True`` on padded rows, except where the backend takes none on
  dense inputs (2.11's efficient kernel: "both fused kernels require query, key
  and value to have the same num_heads"); nested SDPA takes no ``enable_gqa``
  on every backend. Without it the key heads are repeated (from fp32 leaves, so
  that autograd sums their gradients in fp32).
- Short sides (padded rows): the fused kernels take no empty side ("All fused
  kernels do not support zero seq_len_q or seq_len_kv") and cuDNN no single key
  ("cudnn SDPA does not support key/value sequence length 1"). Such a side is
  padded, as a padded batch is, with tokens the mask leaves out, whose outputs
  and gradients are dropped (``min_q``, ``min_kv``).

Declined, with the reason:

- what the backend refuses: the call raises "No available kernel" (torch's own
  checks, ``can_use_*_attention``) and the module declines with torch's words,
  its warnings included (``warn_always``: some are TORCH_WARN_ONCE); the domains
  keep dtypes and head dims inside what each backend takes, so few draws land
  there;
- ``CudnnJagged`` maps what cuDNN refuses: a sequence with one key (torch's rule,
  which torch applies to dense inputs only) goes out with that key twice, the same
  attention; and it declines a backward in which a sequence is longer than the head
  dim: torch's nested cuDNN backward (``_cudnn_attention_backward``) reads the
  longest sequence from ``query.size(2)`` and ``key.size(2)``, which on the packed
  ``[total, H, D]`` buffers are the head dims, and cuDNN then sizes its dq
  accumulator by the head dim and writes past it (the defect pytorch/pytorch PR
  #186142 fixes; the wrong dq of the H100 run, 9 queries at head dim 8, was it);
- jagged: the domain says positions from 0, no window and the kinds without a
  bottom-right term (nested SDPA reads documents by index and takes
  ``is_causal`` alone, documented top-left; our bottom-right kinds equal the
  top-left ones on equal sides, which those draw); inside it, a causal band the
  adapter anchors bottom-right on unequal sides, what the cuDNN convention
  cannot say, a batch the suite rejects. The flash backend applies ``is_causal``
  bottom-right on nested inputs (a bug of torch 2.11, docs/findings): judged,
  against its expected failures. ``MathJagged`` takes no causal kind:
  the math backend refuses ``is_causal`` on nested tensors.
"""

from __future__ import annotations

import warnings

import numpy as np

from attn_oracle import adapters, packing
from attn_oracle.domain import TOP_LEFT_KINDS
from attn_oracle.errors import Unsupported
from attn_oracle.stacks import convention_call, decline, require
from attn_oracle.stacks import torch_flex
from attn_oracle import Domain

STACK, CHECKED = "PyTorch SDPA", ("2.15", "2.11")
torch = require(STACK, "torch", "torch", checked=CHECKED)
attention = require(STACK, "torch.nn.attention", "torch", checked=CHECKED)
from attn_oracle.stacks._torch_common import TORCH_DTYPES as DTYPES, leaf, to_numpy, tokens_to_rows  # noqa: E402
F = torch.nn.functional
# By these names in nested_sdpa, which a reproduction pastes under the same imports.
SDPBackend, sdpa_kernel, scaled_dot_product_attention = (attention.SDPBackend, attention.sdpa_kernel,
                                                         F.scaled_dot_product_attention)

__all__ = ["EfficientPadded", "CudnnPadded", "MathPadded", "FlashJagged", "EfficientJagged", "CudnnJagged",
           "MathJagged"]

BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
REFUSED = ("No available kernel", "No viable backend")  # how SDPA says that no enabled backend takes the call


class _Sdpa:
    backend = "math"
    version = torch.__version__
    device = torch_flex.Backend.device
    outputs = ("gradients",)

    def sdpa(self, q, k, v, **kwargs):
        """SDPA under sdpa_kernel(this backend); torch's refusal becomes a decline in its words."""
        # Some of torch's reasons are TORCH_WARN_ONCE (cuDNN's "key/value sequence length 1"):
        # warn_always makes every refusal say its reason, not only the first.
        always = torch.is_warn_always_enabled()
        with warnings.catch_warnings(record=True) as said, attention.sdpa_kernel(getattr(attention.SDPBackend,
                                                                                         BACKENDS[self.backend])):
            warnings.simplefilter("always")
            torch.set_warn_always(True)
            try:
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
            except RuntimeError as e:
                if not str(e).startswith(REFUSED):
                    raise
                why = "; ".join(dict.fromkeys(str(w.message).splitlines()[0] for w in said))
                raise Unsupported(f"SDPA's {self.backend} backend refuses: {str(e).splitlines()[0]}"
                                  f"{' (' + why + ')' if why else ''}") from None
            finally:
                torch.set_warn_always(always)

    def unsupported_attention(self, problem):
        return None if problem.dtype in DTYPES else f"dtype {problem.dtype}"

    def leaf(self, a, dtype, grad):
        return leaf(a, self.device, dtype, grad)


class _Padded(_Sdpa):
    """The batch's rows, heads first, with the document mask as a boolean attn_mask."""

    token_level_mask = True  # the mask is the token-level rule itself, every pair
    rule = torch_flex.Backend()  # the document rule in torch's words: its mask_mod, on every pair
    enable_gqa = True  # False: the backend takes no enable_gqa on dense inputs, key heads repeated
    min_q, min_kv = 0, 0  # the fewest tokens a side may have; shorter sides are padded

    def attn_mask(self, keep, attends):
        """SDPA's boolean attn_mask (True: attends); a query with no key attends every key (its o is zeroed)."""
        return keep | ~attends

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        tq, tkv = inputs.q.shape[1], inputs.k.shape[1]
        pad_q, pad_kv = max(self.min_q - tq, 0), max(self.min_kv - tkv, 0)
        keep = torch.nn.functional.pad(self.rule.dense_mask(problem.batch), (0, pad_kv, 0, pad_q))[:, None]
        attends = keep.any(-1, keepdim=True)  # [R, 1, Tq, Tkv]; padded tokens attend and are attended by nothing
        padded = lambda a, n: np.pad(a, ((0, 0), (0, n), (0, 0), (0, 0)))  # noqa: E731
        dtype, grad = DTYPES[problem.dtype], problem.backward
        groups = problem.heads_q // problem.heads_kv
        repeat = groups > 1 and not self.enable_gqa
        q = self.leaf(padded(inputs.q, pad_q).transpose(0, 2, 1, 3), dtype, grad)
        # Repeated key heads are summed back by autograd: in fp32, as a kernel with GQA would.
        k, v = (self.leaf(padded(a, pad_kv).transpose(0, 2, 1, 3), torch.float32 if repeat else dtype, grad)
                for a in (inputs.k, inputs.v))
        kc, vc = (x.repeat_interleave(groups, 1).to(dtype) for x in (k, v)) if repeat else (k, v)
        o = self.sdpa(q, kc, vc, attn_mask=self.attn_mask(keep, attends), scale=problem.effective_scale,
                      enable_gqa=groups > 1 and not repeat) * attends
        out = {"o": to_numpy(o.transpose(1, 2))[:, :tq]}
        if grad:
            o.backward(self.leaf(padded(inputs.do, pad_q).transpose(0, 2, 1, 3), dtype, False))
            out.update(dq=to_numpy(q.grad.transpose(1, 2))[:, :tq], dk=to_numpy(k.grad.transpose(1, 2))[:, :tkv],
                       dv=to_numpy(v.grad.transpose(1, 2))[:, :tkv])
        return out


def jagged_layout(batch) -> dict:
    """The cuDNN adapter's sequences with is_causal, or Unsupported."""
    call = convention_call(adapters.cudnn_from_batch, batch, convention="the sequence convention",
                           unvalidated="SDPA validates no ids")
    q_len, kv_len = np.asarray(call["seq_len_q"], np.int64), np.asarray(call["seq_len_kv"], np.int64)
    left, right = call["left_bound"], call["right_bound"]
    if left is not None or right not in (None, 0):
        raise Unsupported(f"a window (bounds {left}, {right}): nested SDPA takes no mask but is_causal")
    causal = right == 0
    if causal and call["diagonal_alignment"] == "bottom_right" and (q_len != kv_len).any():
        raise Unsupported("a causal band anchored bottom-right on a sequence of unequal sides: SDPA's is_causal is "
                          "top-left")
    return {"q_len": q_len, "kv_len": kv_len, "causal": causal,
            "q_tokens": packing.span_tokens(call["ragged_offset_q"][:-1], q_len),
            "kv_tokens": packing.span_tokens(call["ragged_offset_kv"][:-1], kv_len)}


class _Jagged(_Sdpa):
    """One sequence per document, as nested tensors of jagged layout."""

    def layout(self, batch):
        return jagged_layout(batch)

    def key_rows(self, kv_len):
        """(the rows of the packed keys the call takes, None for all as they are; its sequence lengths)."""
        return None, kv_len

    def unsupported_layout(self, problem, layout):
        """Why this backend cannot take these sequences, or None."""
        return None

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        layout = self.layout(problem.batch)
        decline(self.unsupported_layout(problem, layout))
        keep = layout["kv_len"] > 0  # a sequence with no key stays out: its queries attend nothing
        q_tok = np.concatenate([t for t, ok in zip(np.split(layout["q_tokens"], np.cumsum(layout["q_len"])[:-1]), keep)
                                if ok] or [np.zeros(0, np.int64)])
        kv_tok = layout["kv_tokens"]
        dtype, grad = DTYPES[problem.dtype], problem.backward
        groups = problem.heads_q // problem.heads_kv
        flat = lambda a: a.reshape(-1, a.shape[2], a.shape[3])  # noqa: E731
        q = self.leaf(flat(inputs.q)[q_tok], dtype, grad)
        kv_dtype = torch.float32 if groups > 1 else dtype  # repeated heads: their gradients summed in fp32
        k, v = self.leaf(flat(inputs.k)[kv_tok], kv_dtype, grad), self.leaf(flat(inputs.v)[kv_tok], kv_dtype, grad)
        out = {"o": np.zeros(inputs.q.shape)}
        if len(q_tok):
            def nested(x, lengths):
                offsets = torch.from_numpy(packing.cu_seqlens(lengths)).to(self.device)
                return torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2)
            kc, vc = (k, v) if groups == 1 else (x.repeat_interleave(groups, 1).to(dtype) for x in (k, v))
            rows, kv_len = self.key_rows(layout["kv_len"][keep])
            if rows is not None:  # autograd sums the gradients of a repeated row
                kc, vc = kc[rows], vc[rows]
            o = self.sdpa(nested(q, layout["q_len"][keep]), nested(kc, kv_len), nested(vc, kv_len),
                          is_causal=layout["causal"], scale=problem.effective_scale)
            o = o.transpose(1, 2).values()  # [total_q, H, D]
            out["o"] = tokens_to_rows(o, q_tok, inputs.q.shape)
            if grad:
                o.backward(self.leaf(flat(inputs.do)[q_tok], dtype, False))
        if grad:
            out.update({name: tokens_to_rows(x.grad, tokens, side.shape)
                        for name, x, tokens, side in (("dq", q, q_tok, inputs.q), ("dk", k, kv_tok, inputs.k),
                                                      ("dv", v, kv_tok, inputs.v))})
        return out


def past_head_dim(problem, layout):
    """A backward on nested cuDNN with a sequence longer than the head dim, or None (see CudnnJagged)."""
    longest = max([0, *layout["q_len"].tolist(), *layout["kv_len"].tolist()])
    if not problem.backward or longest <= problem.head_dim:
        return None
    return (f"a backward with a sequence of {longest} tokens over head dim {problem.head_dim}: torch's nested cuDNN "
            "backward sizes dq's accumulator by the head dim (_cudnn_attention_backward reads the longest sequences "
            "from query.size(2) and key.size(2); pytorch/pytorch PR #186142) and writes past it")


HALF = ("fp16", "bf16")
TILE_HEAD_DIMS = (8, 16, 32, 64, 128)
# Nested SDPA reads a document by index and takes is_causal alone, top-left: positions from 0,
# no window, the kinds without a bottom-right term (on equal sides they are the same masks).
JAGGED = dict(positions_from_zero=True, windows=False, mask_kinds=TOP_LEFT_KINDS)


class EfficientPadded(_Padded):
    """2.11's efficient kernel takes no GQA on dense inputs ("both fused kernels require query, key
    and value to have the same num_heads"): the key heads are repeated. No fused kernel takes an
    empty side ("zero seq_len_q or seq_len_kv"): it is padded to one masked token."""

    name, backend = "torch-sdpa-efficient-padded", "efficient"
    domain = Domain(head_dims=TILE_HEAD_DIMS + (256,))
    enable_gqa, min_q, min_kv = False, 1, 1


class CudnnPadded(_Padded):
    """cuDNN takes no empty side and no single key ("cudnn SDPA does not support key/value sequence
    length 1"): the key side is padded to two tokens, the query side to one, masked out."""

    name, backend = "torch-sdpa-cudnn-padded", "cudnn"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS)
    min_q, min_kv = 1, 2


class MathPadded(_Padded):
    name, backend = "torch-sdpa-math-padded", "math"


class FlashJagged(_Jagged):
    """torch 2.11 passes ``is_causal`` of nested inputs to FlashAttention-2 as it is, whose causal
    is bottom-right per sequence: on a sequence with fewer keys than queries its first queries
    attend nothing where SDPA documents top-left. A bug (docs/findings/torch-2.11-sdpa-nested-flash-
    causal-bottom-right.md), run against fixtures/xfails/torch-2.11-sdpa-flash-jagged.txt. Without
    ``sdpa_kernel`` nested SDPA tries flash first, so an fp16/bf16 causal call gets bottom-right and
    the same call in fp32 (efficient kernel) top-left."""

    name, backend = "torch-sdpa-flash-jagged", "flash"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS + (256,), **JAGGED)

    def reproduction(self, case):
        """The call a reproduction makes (attn_oracle.repro): SDPA's flash backend on nested tensors."""
        from ..repro import StackCall

        return StackCall(
            imports=["import torch", "from torch.nn.attention import SDPBackend, sdpa_kernel",
                     "from torch.nn.functional import scaled_dot_product_attention"],
            functions=[nested_sdpa], call="got = nested_sdpa(q, k, v, q_ids, kv_ids, mask, scale, dtype)",
            fields={"o": "o"},
            notes=[f"Found on torch {torch.__version__} on an NVIDIA H100; needs a CUDA device (flash). "
                   "Exit 1 (AssertionError) while it differs."])


def nested_sdpa(q, k, v, q_ids, kv_ids, mask, scale, dtype):
    """SDPA's flash backend with each document (a run of one id, positions from 0) of each row one
    sequence of a jagged nested tensor, ``is_causal`` for the causal masks; o as [R, T, H, D]."""
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    groups = q.shape[2] // k.shape[2]
    seqs, where = [], []
    for r in range(q_ids.shape[0]):
        for doc in sorted(set(q_ids[r][q_ids[r] != 0].tolist()) & set(kv_ids[r][kv_ids[r] != 0].tolist())):
            qi, ki = np.flatnonzero(q_ids[r] == doc), np.flatnonzero(kv_ids[r] == doc)
            seqs.append((q[r, qi], np.repeat(k[r, ki], groups, 1), np.repeat(v[r, ki], groups, 1)))
            where.append((r, qi))
    def nested(side):  # [N, j, H, D] -> [N, H, j, D]
        return torch.nested.nested_tensor([torch.from_numpy(s[side]).to("cuda", half) for s in seqs],
                                          layout=torch.jagged).transpose(1, 2)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = scaled_dot_product_attention(nested(0), nested(1), nested(2), is_causal="causal" in mask, scale=scale)
    out = np.zeros(q.shape)
    for (r, qi), x in zip(where, o.transpose(1, 2).unbind()):
        out[r, qi] = x.double().cpu().numpy()
    return {"o": out}


class EfficientJagged(_Jagged):
    name, backend = "torch-sdpa-efficient-jagged", "efficient"
    domain = Domain(head_dims=TILE_HEAD_DIMS + (256,), **JAGGED)


class CudnnJagged(_Jagged):
    """torch's cuDNN check refuses a single key ("cudnn SDPA does not support key/value sequence
    length 1", ``check_cudnn_tensor_shapes``) but reads it off dense inputs only. Mapped, not
    declined (47% of the draws hold such a document): a sequence with one key is sent with that
    key twice, which is the same attention (two equal scores share the weight of one, under
    top-left causal too: every query sees key 0), and autograd sums the two copies' gradients.

    The wrong dq of the H100 run (one document of 9 queries and 1 key, head dim 8: dq -1.27 at
    query 8 where 0 is exact) is not the single key. torch 2.11's ``_cudnn_attention_backward``
    takes the longest sequences from ``query.size(2)`` and ``key.size(2)``, the head dims of the
    packed buffers, so cuDNN's dq accumulator holds head-dim rows a sequence and query 8 is written
    past it; pytorch/pytorch PR #186142 ("Fix cuDNN SDPA varlen backward reading d_qk as
    max_seqlen") passes the real longest lengths instead. Sending the key twice does not avoid it.
    A backward with a sequence longer than the head dim is declined (``past_head_dim``): an
    out-of-bounds write may also be what left the second run's first backward without an answer
    for 60 s. No torch release is known here to carry the fix, so the decline holds for every one."""

    name, backend = "torch-sdpa-cudnn-jagged", "cudnn"
    domain = Domain(dtypes=HALF, head_dims=TILE_HEAD_DIMS, **JAGGED)

    def unsupported_layout(self, problem, layout):
        return past_head_dim(problem, layout)

    def key_rows(self, kv_len):
        starts = packing.cu_seqlens(kv_len)[:-1]
        rows = [np.full(2, a) if n == 1 else np.arange(a, a + n) for a, n in zip(starts, kv_len)]
        return torch.from_numpy(np.concatenate(rows)).to(self.device), np.where(kv_len == 1, 2, kv_len)


class MathJagged(_Jagged):
    """The math backend takes no is_causal on nested tensors (torch refuses it; the CPU tests show it)."""

    name, backend = "torch-sdpa-math-jagged", "math"
    domain = Domain(**{**JAGGED, "mask_kinds": ("no_mask", "padding")})
