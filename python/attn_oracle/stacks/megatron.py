"""Megatron-core: its GPT data path's packed-sequence metadata, and its EOD attention mask under SDPA.

Megatron-core takes packed documents as rows of ``seq_length`` tokens (one
sample each), every document running on from the previous one, positions
restarting at 0 in each, one batch for q and kv, no padding: the domain below.
A document of the suite's batch is one run of one id; row r is sample r.

``Backend`` (metadata): each row goes through ``GPTDataset.__getitem__`` with
``inter_document_masking=True`` (its per-sample ``cu_seqlens``, right-padded
with copies of ``seq_length`` to ``seq_length + 1`` entries, and ``max_seqlen``),
the samples through ``torch.utils.data.default_collate`` (what Megatron's data
loader uses), the batch through ``megatron.core.utils.flatten_batch_for_packed_sequences``
(one flat stream of ``B * seq_length`` tokens, one ``cu_seqlens``), and that into
``PackedSeqParams(qkv_format="thd", ...)`` as Megatron's GPT ``get_batch`` builds
it (the training script builds it; the package has no function for that
step). The suite's fields are read off ``PackedSeqParams``: ``cu_seqlens_q`` /
``cu_seqlens_kv`` as they are, ``ragged_offsets_*`` from ``cu_seqlens_*_padded``
(``cu_seqlens`` when there is none: no padding between documents), the
per-row fields from the spans, and the optional ``max_seqlen_q`` /
``max_seqlen_kv``. Only the document lookup of the dataset is replaced (the
documents come from the batch, not from an indexed file on disk).

``PaddedBackend`` (metadata): Megatron's padded variants, ``cu_seqlens_q/kv_padded``,
from ``megatron.core.models.multimodal.context_parallel.get_packed_seq_params``
(the one function of the package that builds them; context parallelism pads
each sample's sequence at its end). Its domain: one sample of one document
followed by padding (``padding_causal`` / ``padding``). ``ragged_offsets_*``
are ``cu_seqlens_*_padded``; ``max_seqlen`` there is the padded length
(TransformerEngine's convention for padded THD), so it is not returned.

``EodMaskBackend`` (attention): the same ``GPTDataset.__getitem__`` with
``reset_attention_mask=True``, ``reset_position_ids=True`` and
``create_attention_mask=True``, each document ending with the EOD token (the
row's last document may run off the sample's end, as in training). The mask it
returns (``True`` = masked, Megatron's convention) is inverted for
``torch.nn.functional.scaled_dot_product_attention`` (``True`` = attends); its
``position_ids`` must equal the batch's positions, or the call fails saying so.
Float64, GQA by ``enable_gqa``, gradients by autograd; the lse is the
log-sum-exp of the same masked scores (SDPA returns none).

``TrainingEodMaskBackend``: the same, with the mask from the public
``megatron.training.utils.get_ltor_masks_and_position_ids`` (batch-wide, with a
pad token distinct from EOD, as a tokenizer with its own pad token gives). In
0.19.2 it finds the EOD tokens with ``positions[eod] & positions[pad]``, a
bitwise AND of two index lists: with no pad token in a sample, one EOD resets
nothing (the documents attend each other, positions run on) and two or more
raise a RuntimeError. scripts/stacks runs it against
fixtures/xfails/megatron-training-0.19.txt (docs/stacks.md, Megatron-core).

The query that attends nothing: none exists in the attention domain (top-left
causal, no padding: every query attends itself). SDPA's convention there would
be NaN (a softmax over no key); since no draw of the domain has such a query,
the module maps nothing.

Declined: everything outside each class's domain (for the packed and EOD paths:
padding tokens, cross attention, positions not from 0, extra dims, windows,
bottom-right and padding kinds); a sample of no tokens; and what the reference
rejects, since Megatron-core never validates packed metadata (the reference's
own check decides, and the decline names its error code). ``no_mask`` is taken
by ``Backend`` only: the metadata of a batch without padding is the same for
``causal`` and ``no_mask``, and Megatron's GPT mask is causal.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from attn_oracle import Domain, oracle, packing
from attn_oracle.stacks import installed_version, require, unvalidated_reason

_mcore = require("Megatron-core", "megatron.core", "megatron-core", checked=("0.19",))
import torch  # noqa: E402  (after require: the one-line message when Megatron-core is absent)
from megatron.core.datasets.gpt_dataset import GPTDataset  # noqa: E402
from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402
from megatron.core.utils import flatten_batch_for_packed_sequences  # noqa: E402
from torch.nn.functional import scaled_dot_product_attention  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402

__all__ = ["Backend", "PaddedBackend", "EodMaskBackend", "TrainingEodMaskBackend", "packed_seq_params", "eod_tokens",
           "training_ltor_masks", "sdpa_under_mask"]

VERSION = installed_version("megatron-core")
EOD, PAD, TEXT = 2, 3, 7  # token ids: end of document, a pad token no sample holds, any other token

torch.set_num_threads(1)  # drawn problems are tiny; intra-op threads cost more than they save


def _runs(ids_row: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, id) of each run of one id along a row."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    bounds = [0, *cut.tolist(), len(ids_row)]
    return [(a, b, int(ids_row[a])) for a, b in zip(bounds, bounds[1:])]


def eod_tokens(ids_row: np.ndarray) -> np.ndarray:
    """Token ids of one sample: each document's last token is EOD, except the row's last document
    (it runs off the sample's end); the extra label token Megatron reads after the sample is
    appended (``add_extra_token_to_sequence``)."""
    text = np.full(len(ids_row) + 1, TEXT, dtype=np.int64)
    for a, b, _ in _runs(ids_row)[:-1]:
        text[b - 1] = EOD
    return text


class _Samples(GPTDataset):
    """GPTDataset whose documents are the batch's rows: only its document lookup is replaced,
    ``__getitem__`` (cu_seqlens, max_seqlen, masks, positions) is Megatron's."""

    def __init__(self, ids: np.ndarray, **flags):  # noqa: D107 - no indexed dataset behind it
        self._rows = ids
        self.config = SimpleNamespace(
            tokenizer=SimpleNamespace(eod=EOD, pad=PAD), sequence_length=ids.shape[-1],
            add_extra_token_to_sequence=True, reset_position_ids=False, reset_attention_mask=False,
            eod_mask_loss=False, create_attention_mask=False, inter_document_masking=False)
        for key, value in flags.items():
            setattr(self.config, key, value)
        self.masks_and_position_ids_are_cacheable = not (
            self.config.reset_position_ids or self.config.reset_attention_mask or self.config.eod_mask_loss)
        self.masks_and_position_ids_are_cached = False
        self._pad_token_id = -1  # megatron.core.datasets.megatron_dataset._PAD_TOKEN_ID

    def __len__(self):
        return len(self._rows)

    def _query_document_sample_shuffle_indices(self, idx):
        row = self._rows[idx]
        lengths = [b - a for a, b, _ in _runs(row)]
        lengths[-1] += 1  # the extra token read for the labels belongs to the last document
        return eod_tokens(row), np.arange(len(lengths)), lengths


def packed_seq_params(ids: np.ndarray) -> PackedSeqParams:
    """PackedSeqParams for rows ``ids`` [B, T] (one sample a row) through Megatron's data path."""
    dataset = _Samples(ids, inter_document_masking=True)
    batch = flatten_batch_for_packed_sequences(default_collate([dataset[i] for i in range(len(dataset))]))
    cu = batch["cu_seqlens"][0]
    padded = batch.get("cu_seqlens_padded")
    padded = None if padded is None else padded[0]
    max_seqlen = int(batch["max_seqlen"][0])
    # As Megatron's GPT get_batch builds it for THD attention.
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=padded,
                           cu_seqlens_kv_padded=padded, max_seqlen_q=max_seqlen, max_seqlen_kv=max_seqlen)


def unsupported_reason(batch):
    """The decline of an input Megatron-core's data path does not take, or None."""
    if np.shape(batch.q_segment_ids)[-1] == 0:
        return "a sample of no tokens (Megatron-core's seq_length is at least 1)"
    return unvalidated_reason(batch, "Megatron-core's data path validates no packed metadata")


class Backend:
    """Megatron-core's packed-sequence metadata (PackedSeqParams from its GPT data path)."""

    name, version = "megatron-core-packed-seq-params", VERSION
    domain = Domain(self_attention_only=True, no_padding=True, positions_from_zero=True, extra_dims=False,
                    mask_kinds=("causal", "no_mask"), windows=False)

    def unsupported_metadata(self, batch):
        return unsupported_reason(batch)

    def params(self, ids: np.ndarray) -> PackedSeqParams:
        return packed_seq_params(ids)

    def metadata(self, batch):
        ids = np.asarray(batch.q_segment_ids)
        p = self.params(ids)
        out = {}
        for side, cu, padded, longest in (("q", p.cu_seqlens_q, p.cu_seqlens_q_padded, p.max_seqlen_q),
                                          ("kv", p.cu_seqlens_kv, p.cu_seqlens_kv_padded, p.max_seqlen_kv)):
            cu = cu.numpy().astype(np.int64)
            ragged = cu if padded is None else padded.numpy().astype(np.int64)
            out[f"cu_seqlens_{side}"] = cu
            out[f"ragged_offsets_{side}"] = ragged
            out[f"max_seqlen_{side}"] = int(longest)
        # The per-slot fields from the documents those prefix sums say; the rest as Megatron gave them.
        spans = packing.spans_from_cu_seqlens(out["cu_seqlens_q"], out["ragged_offsets_q"])
        slots = packing.metadata_from_spans(batch, spans)
        return out | {name: slots[name] for name in ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets")}


class PaddedBackend(Backend):
    """Megatron-core's padded packed-sequence metadata: ``cu_seqlens_q/kv_padded`` for samples padded at the end."""

    name = "megatron-core-padded-packed-seq-params"
    # One document a sample (M = 1) from token 0, padding after it, as context parallelism pads a sequence.
    domain = Domain(self_attention_only=True, positions_from_zero=True, one_sequence_a_row=True, max_rows=1,
                    extra_dims=False, mask_kinds=("padding_causal", "padding"), windows=False,
                    sizes={"max_segments": [1]})

    def unsupported_metadata(self, batch):
        reason = unsupported_reason(batch)
        if reason is not None:
            return reason
        ids = np.asarray(batch.q_segment_ids)
        valid = int((ids[0] != 0).sum())
        if valid == 0:
            return "a sample without a token (get_packed_seq_params raises RuntimeError: step must be nonzero)"
        if (ids[0, :valid] == 0).any():
            return "padding before the sequence's tokens (Megatron-core's padding follows them)"
        return None

    def params(self, ids: np.ndarray) -> PackedSeqParams:
        from megatron.core.models.multimodal.context_parallel import get_packed_seq_params

        padding = int((ids[0] == 0).sum())
        return get_packed_seq_params(torch.from_numpy(ids), 0, padding, cp_size=2, use_packed_sequence=True)

    def metadata(self, batch):
        out = super().metadata(batch)
        # max_seqlen of this path is the padded length (TransformerEngine's convention for padded
        # THD), not the longest document's valid tokens: not returned.
        del out["max_seqlen_q"], out["max_seqlen_kv"]
        return out


class EodMaskBackend:
    """Attention under the mask Megatron's GPT dataset builds from EOD tokens, through SDPA."""

    name, version = "megatron-core-eod-mask-sdpa", VERSION
    domain = Domain(self_attention_only=True, no_padding=True, positions_from_zero=True, extra_dims=False,
                    mask_kinds=("causal",), windows=False)
    check_positions = True  # Megatron's position_ids must equal the batch's positions, or the call fails

    def unsupported_attention(self, problem):
        return unsupported_reason(problem.batch)

    def masks(self, ids: np.ndarray):
        """Megatron's attention mask [B, 1, T, T] (True = masked) and position ids [B, T] for rows ``ids``."""
        dataset = _Samples(ids, reset_attention_mask=True, reset_position_ids=True, create_attention_mask=True)
        samples = default_collate([dataset[i] for i in range(len(dataset))])
        return samples["attention_mask"], samples["position_ids"]

    def attention(self, p, x):
        ids = np.asarray(p.batch.q_segment_ids)
        masked, positions = self.masks(ids)
        want = np.asarray(p.batch.q_segment_pos)
        if self.check_positions and not np.array_equal(positions.numpy(), np.broadcast_to(want, positions.shape)):
            raise AssertionError(f"Megatron's position_ids {positions.numpy().tolist()} differ from the batch's "
                                 f"positions {np.broadcast_to(want, positions.shape).tolist()}")
        return sdpa_under_mask(masked, x.q, x.k, x.v, p.effective_scale, x.do if p.backward else None)


class TrainingEodMaskBackend(EodMaskBackend):
    """The same attention with the mask from ``megatron.training.utils.get_ltor_masks_and_position_ids``."""

    name = "megatron-training-ltor-mask-sdpa"
    # Its positions are as wrong as its mask where it is wrong (docs/stacks.md): the mask is what the
    # suite judges, so a wrong position does not stop the call.
    check_positions = False

    def masks(self, ids: np.ndarray):
        return training_ltor_masks(ids)

    def reproduction(self, case):
        """The calls a reproduction makes (attn_oracle.repro): Megatron's public mask function, then SDPA."""
        from ..repro import StackCall

        ids = np.asarray(case.fields["q"]["segment_ids"])
        allowed = oracle.explicit_mask(ids, case.fields["q"]["segment_pos"], mask=case.fields["mask"],
                                       max_segments=case.fields["max_segments"])
        return StackCall(
            imports=["import torch", "from megatron.training.utils import get_ltor_masks_and_position_ids",
                     "from torch.nn.functional import scaled_dot_product_attention", "",
                     f"EOD, PAD, TEXT = {EOD}, {PAD}, {TEXT}  # token ids: end of document, a pad token no sample holds, "
                     "any other"],
            functions=[_runs, eod_tokens, training_ltor_masks, sdpa_under_mask],
            call="attention_mask, position_ids = training_ltor_masks(q_ids)  # True = masked\n"
                 "got = {**sdpa_under_mask(attention_mask, q, k, v, scale, do), \"attention_mask\": attention_mask.numpy(),\n"
                 "       \"position_ids\": position_ids.numpy()}",
            fields={"o": "o", "lse": "lse", "dq": "dq", "dk": "dk", "dv": "dv"},
            expected={"attention_mask": ~allowed[:, None], "position_ids": np.asarray(case.fields["q"]["segment_pos"])},
            notes=[f"Found on megatron-core {VERSION} (torch {torch.__version__}); runs on a CPU. "
                   "Exit 1 (AssertionError) while it differs."])


def training_ltor_masks(ids: np.ndarray):
    """Megatron's attention mask [B, 1, T, T] (True = masked) and position ids from the public
    ``megatron.training.utils.get_ltor_masks_and_position_ids``, for rows ``ids`` whose documents
    end with EOD, with a pad token distinct from EOD (the one place this module calls it)."""
    from megatron.training.utils import get_ltor_masks_and_position_ids

    data = torch.from_numpy(np.stack([eod_tokens(row)[:-1] for row in ids]))
    mask, _, positions = get_ltor_masks_and_position_ids(
        data, EOD, PAD, reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=False,
        pad_mask_loss=False)
    return mask, positions


def sdpa_under_mask(masked, q, k, v, scale, do=None):
    """torch's SDPA under a Megatron mask (True = masked) on float64 [R, T, H, D] arrays: o, the lse
    [R, Hq, Tq] of the same masked scores and, with ``do``, dq, dk, dv by autograd."""
    attends = ~masked.reshape(q.shape[0], 1, q.shape[1], k.shape[1])  # SDPA: True = attends

    def heads_first(a, grad):  # [R, T, H, D] -> [R, H, T, D]
        return torch.from_numpy(np.ascontiguousarray(np.transpose(a, (0, 2, 1, 3)), np.float64)).requires_grad_(grad)

    def tokens_first(t):
        return t.detach().transpose(1, 2).numpy()

    tq, tk, tv = (heads_first(t, do is not None) for t in (q, k, v))
    o = scaled_dot_product_attention(tq, tk, tv, attn_mask=attends, scale=scale, enable_gqa=q.shape[2] != k.shape[2])
    groups = q.shape[2] // k.shape[2]
    scores = tq.detach() @ tk.detach().repeat_interleave(groups, 1).transpose(-1, -2) * scale
    out = {"o": tokens_first(o), "lse": torch.logsumexp(scores.masked_fill(~attends, float("-inf")), -1).numpy()}
    if do is not None:
        o.backward(heads_first(do, False))
        out.update(dq=tokens_first(tq.grad), dk=tokens_first(tk.grad), dv=tokens_first(tv.grad))
    return out
