"""Hugging Face transformers: its packed-sequence metadata and its packed SDPA attention.

``python -m attn_oracle check attn_oracle.stacks.hf_transformers:CLASS``, one class per path:

==================  ===========================================================
PositionIdsMetadata ``modeling_flash_attention_utils.prepare_fa_kwargs_from_position_ids``:
                    packed position_ids -> cu_seqlens, max_seqlen (what the flash
                    path calls on packed rows, ``_prepare_from_posids``)
UnpadMetadata       the 2D-mask unpad path: ``_upad_input`` (queries) and
                    ``_get_unpad_data`` (keys) -> indices, cu_seqlens, max_seqlen
CollatorMetadata    ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``:
                    cu_seq_lens_q/k, max_length_q/k of a flattened mini batch
SdpaAttention       ``masking_utils.create_causal_mask`` /
                    ``create_sliding_window_causal_mask`` with packed position_ids,
                    run through ``integrations.sdpa_attention.sdpa_attention_forward``
==================  ===========================================================

What transformers takes, declared as each class's ``Domain``: self-attention (one
``position_ids`` or ``attention_mask`` for q and kv), positions from 0 in every
document (transformers reads the document boundaries off them); the packed paths take no padding, the unpad path takes
one sequence per row and padding around it. Packed masks are causal only
(``create_bidirectional_mask`` takes no position_ids), with a sliding window of W
tokens, the query included: ``kv_idx > q_idx - W``, our window ``(W - 1, -1)``.

Conventions mapped:

- extra (vmapped) dims are flattened into rows: transformers' packed tensors are
  ``[B, T]``, and ours, flattened, are rows in the suite's row-major token order;
- cu_seqlens hold every sequence, a row of the 2D mask with no valid token
  included (a repeated entry); ours hold documents with valid tokens, so
  repeated entries are dropped. The stacks' ``int32`` arrays are read as int64.
- transformers gives only cu_seqlens (and indices, max_seqlen): every other
  metadata field is filled from the document spans they give (``row = start //
  T``), so a wrong span shows in every field.
- ``max_length_q/k`` and ``max_seqlen_in_batch`` are our ``max_seqlen_q/kv``;
  ``indices_q`` / ``indices_k`` are our ``indices_q`` / ``indices_kv``.

A query that attends nothing: inside these domains there is none (every query
attends itself: causal self-attention, and a window of at least one token). The
SDPA path's convention there is torch's SDPA's: a fully masked boolean row gives
NaN (the math kernel's softmax over no key); transformers' masks never make one
for packed rows, so nothing is mapped, and an input that would need it (a query
whose document has no key) is outside the domain.

Two packing rules disagree in transformers: the flash path starts a document
where the position equals the minimum (and packs only for B = 1), the SDPA /
eager / flex paths wherever the position does not step by 1 (``[0, 1, 2, 5, 6]``
is one document for the first, two for the second).
``attn_oracle.adapters.transformers_position_ids_to_batch(position_ids, rule=...)``
has both; docs/findings/README.md counts where they disagree on drawn batches.

``SdpaAttention`` runs on a CUDA device where there is one (torch's SDPA then
picks a CUDA kernel for transformers' boolean mask; ``scripts/stacks --device``),
else on the CPU.

Pointing it at a checkout of transformers: ``pip install -e CHECKOUT`` into the
venv (scripts/stacks makes build/stacks/torch), or put ``CHECKOUT/src`` first on
``PYTHONPATH``; the version gate names the release it finds.
"""

from __future__ import annotations

import numpy as np

from attn_oracle import packing
from attn_oracle.domain import CAUSAL_KINDS
from attn_oracle.stacks import decline, require, unvalidated_reason
from attn_oracle import Domain

STACK, CHECKED = "Hugging Face transformers", ("5.24", "5.17")
torch = require(STACK, "torch", "torch", checked=("2.15",))
transformers = require(STACK, "transformers", "transformers", checked=CHECKED)
fa_utils = require(STACK, "transformers.modeling_flash_attention_utils", "transformers", checked=CHECKED)
masking_utils = require(STACK, "transformers.masking_utils", "transformers", checked=CHECKED)
sdpa_attention = require(STACK, "transformers.integrations.sdpa_attention", "transformers", checked=CHECKED)
data_collator = require(STACK, "transformers.data.data_collator", "transformers", checked=CHECKED)
from attn_oracle.stacks._torch_common import TORCH_DTYPES as DTYPES, has_cuda, heads_first, leaf, to_numpy  # noqa: E402

__all__ = ["PositionIdsMetadata", "UnpadMetadata", "CollatorMetadata", "SdpaAttention"]

PACKED = dict(self_attention_only=True, no_padding=True, positions_from_zero=True)


def _rows(batch):
    """[R, T] ids and positions of a self-attention batch, extra dims flattened into rows
    (transformers' packed tensors are [B, T]; R = prod(extra) * B, row-major as the suite's tokens)."""
    r = packing.rows(batch, validate=False)  # _outside checks the batch first
    return r.q_ids, r.q_pos


def _spans_from_cu(cu, starts=None):
    """The non-empty sequences of transformers' cu_seqlens as spans: a repeated entry (a row of
    the 2D mask with no valid token) is no document of ours."""
    return [(start, n) for start, n in packing.spans_from_cu_seqlens(cu, starts) if n > 0]


def _metadata(batch, cu_q, cu_k, starts_q=None, starts_k=None, **given) -> dict:
    """The metadata fields from the spans of the stack's cu_seqlens (the flattened rows are our
    [R * T] token axis), with what the stack ``given`` itself (max_seqlen, indices)."""
    out = packing.metadata_from_spans(batch, _spans_from_cu(cu_q, starts_q), _spans_from_cu(cu_k, starts_k))
    for name in ("max_seqlen_q", "max_seqlen_kv", "indices_q", "indices_kv"):  # derived: only what the stack gives
        del out[name]
    return out | given


def _outside(batch, *, padding: bool = False):
    """Why transformers' packed tensors cannot say this batch (None when they can).

    transformers validates no position_ids or attention mask: an input the suite's
    rules reject is declined (never judged), and so is one outside the domain (the
    arbitrary-input properties draw them)."""
    if invalid := unvalidated_reason(batch, "transformers validates no position_ids"):
        return invalid
    qi, ki = np.asarray(batch.q_segment_ids), np.asarray(batch.kv_segment_ids)
    qp, kp = np.asarray(batch.q_segment_pos), np.asarray(batch.kv_segment_pos)
    if qi.size == 0:
        return "a batch with no rows or no tokens: transformers raises RuntimeError on empty position_ids"
    if qi.shape != ki.shape or not (np.array_equal(qi, ki) and np.array_equal(np.broadcast_to(qp, qi.shape),
                                                                          np.broadcast_to(kp, ki.shape))):
        return "cross-attention: one position_ids / attention_mask serves q and kv"
    qi, qp = _rows(batch)
    if not padding and (qi == 0).any():
        return "padding in a packed row: transformers packs without padding"
    starts = (qi != 0) & np.c_[np.ones((qi.shape[0], 1), bool), qi[:, 1:] != qi[:, :-1]]
    if ((qp != packing.positions_from_starts(starts)) & (qi != 0)).any():
        return "positions that do not count from 0 in every document: transformers derives them so"
    return None


# ------------------------------------------------------------------ metadata
class PositionIdsMetadata:
    """cu_seqlens and max_seqlen from packed position_ids, by prepare_fa_kwargs_from_position_ids."""

    name, version = "hf-transformers-position-ids", transformers.__version__
    domain = Domain(**PACKED)

    def unsupported_metadata(self, batch):
        return _outside(batch)

    def position_ids(self, batch):
        """What the model is given: the packed position_ids, [B, T], as the user passes them."""
        return torch.from_numpy(np.array(_rows(batch)[1], np.int64))

    def cu_seqlens(self, position_ids):
        (cu_q, cu_k), (max_q, max_k) = fa_utils.prepare_fa_kwargs_from_position_ids(position_ids)
        return cu_q, cu_k, int(max_q), int(max_k)

    def metadata(self, batch):
        decline(self.unsupported_metadata(batch))
        cu_q, cu_k, max_q, max_k = self.cu_seqlens(self.position_ids(batch))
        return _metadata(batch, cu_q.numpy(), cu_k.numpy(), max_seqlen_q=max_q, max_seqlen_kv=max_k)


class UnpadMetadata:
    """indices, cu_seqlens and max_seqlen of the 2D attention mask, by _upad_input and _get_unpad_data."""

    name, version = "hf-transformers-unpad", transformers.__version__
    # One sequence per row (M = 1: the draws hold one document a row), padding around it (left or right).
    domain = Domain(self_attention_only=True, positions_from_zero=True, sizes={"max_segments": [1]})

    def unsupported_metadata(self, batch):
        reason = _outside(batch, padding=True)
        if reason:
            return reason
        ids, _ = _rows(batch)
        if any(len(np.unique(row[row != 0])) > 1 for row in ids):
            return "a row with more than one document: a 2D attention_mask holds one sequence a row (packed rows go through position_ids)"
        return None

    def metadata(self, batch):
        decline(self.unsupported_metadata(batch))
        ids, _ = _rows(batch)
        b, t = ids.shape
        attention_mask = torch.from_numpy(np.ascontiguousarray(ids != 0).astype(np.int64))
        dummy = torch.zeros(b, t, 1, 1)  # [B, T, H, D]: _upad_input gathers these; only the indices are read
        _, _, _, indices_q, (cu_q, _), (max_q, _) = fa_utils._upad_input(
            dummy, dummy, dummy, attention_mask, t, fa_utils._unpad_input)
        indices_k, cu_k, max_k = fa_utils._get_unpad_data(attention_mask)
        indices_q, indices_k = indices_q.numpy(), indices_k.numpy()
        cu_q, cu_k = cu_q.numpy(), cu_k.numpy()
        def first_token(indices, cu):  # where each sequence starts on the [B * T] axis (an empty one: anywhere)
            return indices[np.minimum(cu[:-1], len(indices) - 1)] if len(indices) else cu[:-1]
        return _metadata(batch, cu_q, cu_k, first_token(indices_q, cu_q), first_token(indices_k, cu_k),
                         indices_q=indices_q.astype(np.int64), indices_kv=indices_k.astype(np.int64),
                         max_seqlen_q=int(max_q), max_seqlen_kv=int(max_k))


class CollatorMetadata:
    """cu_seq_lens_q/k and max_length_q/k from DataCollatorWithFlattening over a batch's documents."""

    name, version = "hf-transformers-collator", transformers.__version__
    domain = Domain(**PACKED)

    def unsupported_metadata(self, batch):
        return _outside(batch)

    def features(self, batch):
        """The examples a user's dataset would hold: one per document, rows in order."""
        ids, _ = _rows(batch)
        out = []
        for row in ids:
            starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
            for a, z in zip(starts, np.r_[starts[1:], len(row)]):
                out.append({"input_ids": list(range(int(z - a)))})
        return out

    def metadata(self, batch):
        decline(self.unsupported_metadata(batch))
        collator = data_collator.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True,
                                                            return_tensors="np")
        flat = collator(self.features(batch))
        return _metadata(batch, np.asarray(flat["cu_seq_lens_q"]), np.asarray(flat["cu_seq_lens_k"]),
                         max_seqlen_q=int(flat["max_length_q"]), max_seqlen_kv=int(flat["max_length_k"]))


# ------------------------------------------------------------------ attention
class _Module:
    """What sdpa_attention_forward reads off the attention layer: GQA groups and is_causal."""

    def __init__(self, groups: int):
        self.num_key_value_groups, self.is_causal, self.training = groups, True, False



class SdpaAttention:
    """Packed causal (sliding-window) masks from position_ids by masking_utils, through sdpa_attention_forward."""

    name, version = "hf-transformers-sdpa", transformers.__version__
    outputs = ("gradients",)  # SDPA returns no lse
    device = "cuda" if has_cuda() else "cpu"  # SDPA's CUDA kernels where a device is
    domain = Domain(**PACKED, mask_kinds=CAUSAL_KINDS)

    def unsupported_attention(self, problem):
        reason = _outside(problem.batch)
        if reason:
            return reason
        if problem.dtype not in DTYPES:
            return f"dtype {problem.dtype}"
        return None

    def sliding_window(self, batch):
        """config.sliding_window for our window: W tokens, the query included, is (W - 1, -1)."""
        left = batch.window[0]
        return None if left < 0 else left + 1  # a right side changes nothing under a causal mask

    def config(self, sliding_window):
        config = transformers.PretrainedConfig()
        config._attn_implementation = "sdpa"
        config.sliding_window = sliding_window
        return config

    def position_ids(self, batch):
        return torch.from_numpy(np.array(_rows(batch)[1], np.int64)).to(self.device)

    def mask(self, batch, inputs_embeds):
        window = self.sliding_window(batch)
        create = masking_utils.create_causal_mask if window is None else masking_utils.create_sliding_window_causal_mask
        # The cache goes by position: 5.17 names that parameter past_key_values, 5.24 cache.
        return create(self.config(window), inputs_embeds, None, None, position_ids=self.position_ids(batch))

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        dtype, grad = DTYPES[problem.dtype], problem.backward
        # [B, H, T, D]: the layout the attention layer hands over
        q, k, v = (heads_first(a, self.device, dtype, grad) for a in (inputs.q, inputs.k, inputs.v))
        b, t = _rows(problem.batch)[0].shape
        mask = self.mask(problem.batch, torch.empty(b, t, 1, dtype=dtype, device=self.device))
        o, _ = sdpa_attention.sdpa_attention_forward(_Module(problem.heads_q // problem.heads_kv), q, k, v, mask,
                                                     scaling=problem.effective_scale)
        out = {"o": to_numpy(o)}  # [B, T, H, D] already
        if grad:
            o.backward(leaf(inputs.do, self.device, dtype, False))
            out.update({n: to_numpy(t.grad.transpose(1, 2)) for n, t in (("dq", q), ("dk", k), ("dv", v))})
        return out
