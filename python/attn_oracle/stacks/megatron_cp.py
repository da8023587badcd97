"""Megatron-core's context parallelism over packed (THD) sequences: how it splits a packed batch
over the CP ranks, and the per-rank ``cu_seqlens`` its all-gather CP attention hands a kernel.

``python -m attn_oracle check attn_oracle.stacks.megatron_cp:Backend``

Megatron-core 0.19.2 splits a THD batch in ``megatron.core.utils.get_batch_on_this_cp_rank``:
with ``cu_seqlens`` it takes the per-document path, which calls TransformerEngine's CUDA
``tex.thd_get_partitioned_indices(cu_seqlens_padded, T, cp, rank)`` (no CPU fallback: with TE
absent ``tex`` is None); with ``use_per_sequence_balancing=True`` (or no ``cu_seqlens``) the
per-sequence path, pure torch. Its pure-torch mirror of TE's THD split is
``megatron.core.transformer.experimental_attention_variant.dsa_layout.build_packed_allgather_cp_local_positions``
("each packed sequence is padded to a multiple of 2 * cp_size and each rank receives the
rank-local front chunk followed by the mirrored back chunk"), which the DeepSeek sparse
attention (DSA) uses under all-gather CP, beside ``build_packed_cp_indexer_layout``: the per-rank
segments (``segment_cu_q``, ``segment_cu_k``, ``segment_key_starts``) its kernels are given.
So on a CPU:

``Backend`` (head_tail, all_gather; padding after documents and leading padding; the causal kinds):
  ``cp_permutation``: ``build_packed_allgather_cp_local_positions(cu_seqlens_padded, cp, rank,
  "cpu", output_size=B*T/cp, cu_seqlens_cover_output=True)`` for each rank;
  ``cp_rank_metadata``: ``get_packed_qk_cu_seqlens(PackedSeqParams(qkv_format="thd", ...))``
  (which prefers the padded ``cu_seqlens``) then ``build_packed_cp_indexer_layout(cu_q, cu_kv,
  cp_size=cp, cp_rank=rank, key_size=B*T)``.
``PerSequence`` (dual_chunk_swap): ``cp_permutation`` from ``get_batch_on_this_cp_rank(batch,
  is_hybrid_cp=False, use_per_sequence_balancing=True)`` on a batch whose ``position_ids`` are
  the token indices (each rank's under a fake process group of ``cp`` ranks, torch's
  ``torch.testing._internal.distributed.fake_pg``, which gives ``get_rank`` / ``get_world_size``
  and moves no data); ``cp_reorder`` from the Mamba layer's ``_redo_attention_load_balancing`` /
  ``_undo_attention_load_balancing`` (their non-packed path, pure torch).

Conventions mapped (each in the code where it is mapped):

- The batch's rows are Megatron's micro-batch flattened into one THD stream
  (``flatten_batch_for_packed_sequences``: row b's tokens at ``b * T + t``); ``cu_seqlens_padded``
  lists, row after row, each head_tail span (a document with the padding after it, or a row's
  leading padding, a sequence of no valid token). Megatron's data path builds no
  ``cu_seqlens_padded`` from a padded batch (its datasets pad no document; SFT pipelines outside
  megatron-core do), so the module writes it from the batch, the one input it supplies. Rank r's
  ``B * L`` local tokens are its L tokens of each row, row after row: slot ``b * L + j`` is slot j
  of row b in the contract's ``[B, T]`` permutation.
- The DSA layout gives each document two kernel sequences on a rank: the front chunk's queries
  with keys from the document's start through that chunk, and the back chunk's queries with keys
  through the back chunk (causal prefixes). docs/semantics.md#3-metadata has one entry per
  document: the rank's valid queries of the document (both chunks, adjacent in local order) and
  the keys they attend (the back segment's keys, which hold the front's). The pair is mapped to
  that document: q span = both segments' queries, kv span = the union of their key ranges. A
  front segment whose keys are not a prefix of the back's is not seen by this mapping.
- The segments run over ``cu_seqlens_padded``, padding included; Megatron hands the kernel the
  actual ``cu_seqlens`` beside it, which say where a document's tokens end. A segment is cut to
  the document's tokens (a span's document comes first, its padding after): its valid queries
  and its keys up to the document's end; a segment left without a query is dropped, and a span
  with no document token (a row's leading padding) has no entry.
- A kv token's global index is ``b * T + t``, the contract's all_gather kv side (the whole row in
  row order); a query's is ``b * L + j`` in local order.

Domains: ``Backend`` takes the causal kinds only (the DSA layout has no mask argument: its key
ranges are causal prefixes, what the indexer is for), cp 2, 3, 4 and 8, strategy all_gather (DSA's
``get_cp_positions_from_layout`` raises NotImplementedError for any other ``cp_comm_type``);
``PerSequence`` dual_chunk_swap, cp 1, 2, 3, 4 and 8, any mask, strategies all_gather and ring
(all_to_all's precondition, heads a multiple of cp, is TE's check, in CUDA). Every class: self-attention on [B, T]
rows, no extra dims.

Invalid layouts (``validate_cp_layout``, and ``Backend``'s rank metadata, which checks first):
Megatron's own refusals mapped to the contract's codes: DSA's host-side guard raises ValueError
for a padded sequence not a multiple of 2*cp (``cp_document_not_divisible``; it checks the
sequences only, so a row not a multiple of cp is refused by one of its sequences, where the
contract names the row first: mapped to ``cp_not_divisible`` when the row is off cp); the
per-sequence split's ``view`` raises RuntimeError
for a row not a multiple of 2*cp (``cp_not_divisible``). A malformed layout (cp < 1, indices
for another balance) is ``cp_bad_layout`` before any call. ``Backend``'s rank metadata checks
first, so that an invalid layout gets its code from it too.

Declined, shown by python/tests/test_stack_megatron_cp.py against the real library: cp = 1 for
``Backend``'s rank metadata (``build_packed_cp_indexer_layout`` raises RuntimeError "requires a
valid CP rank and cp_size > 1").

Not served (the classes do not define the method; the suite skips the properties that call it,
with the reason), each shown by the tests against the library: ``cp_attention`` and
``cp_rank_attention`` (Megatron's CP attention is TransformerEngine's CUDA
``AttnFuncWithCPAndKVP2P`` / all-gather, which needs TE on a GPU; ``tex`` is None here);
``PerSequence``'s ``cp_rank_metadata`` (on that path Megatron hands TE the whole row's
``cu_seqlens``, and the per-rank split is TE's CUDA code: the package has no function for it, and
its one caller of the THD split, ``tex``, is None here).
"""

from __future__ import annotations

import numpy as np

from attn_oracle import packing
from attn_oracle.domain import CAUSAL_KINDS
from attn_oracle.errors import AttnOracleError, Unsupported
from attn_oracle.stacks import installed_version, require
from attn_oracle.stacks._cp_common import (check_layout_alone, cp_domain, fake_process_group, head_tail_spans,
                                           rank_batch, rows_of, union_span)

_mcore = require("Megatron-core", "megatron.core", "megatron-core", checked=("0.19",))
import torch  # noqa: E402
from megatron.core import utils as _mutils  # noqa: E402
from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402
from megatron.core.transformer.experimental_attention_variant import dsa_layout  # noqa: E402

__all__ = ["Backend", "PerSequence", "thd_cu_seqlens_padded", "rank_positions", "indexer_layout"]

VERSION = installed_version("megatron-core")


def thd_cu_seqlens_padded(ids: np.ndarray) -> torch.Tensor:
    """int32 ``cu_seqlens_padded`` of rows ``ids`` [B, T] flattened into one THD stream: each
    head_tail span (a document and the padding after it, or leading padding), row after row."""
    b, t = ids.shape
    bounds = [0]
    for row in range(b):
        bounds += [row * t + end for _, end in head_tail_spans(ids[row])]
    return torch.tensor(bounds, dtype=torch.int32)


def rank_positions(cu_seqlens_padded: torch.Tensor, cp: int, rank: int, local: int) -> np.ndarray:
    """Megatron's THD split: the stream tokens rank ``rank`` holds, in its local order (DSA's mirror
    of TE's ``thd_get_partitioned_indices``)."""
    out = dsa_layout.build_packed_allgather_cp_local_positions(
        cu_seqlens_padded, cp, rank, torch.device("cpu"), output_size=local, cu_seqlens_cover_output=True)
    return out.numpy().astype(np.int64)


def _per_row(flat_by_rank: list[np.ndarray], b: int, t: int) -> np.ndarray:
    """[B, T] rank-major from each rank's ``B * L`` stream tokens: slot ``row * L + j`` of a rank is
    slot j of that row, the token ``flat - row * T`` (out of [0, T) when the split crossed rows,
    which the property then shows)."""
    cp = len(flat_by_rank)
    local = t // cp
    perm = np.empty((b, t), np.int64)
    for r, flat in enumerate(flat_by_rank):
        for row in range(b):
            perm[row, r * local:(r + 1) * local] = flat[row * local:(row + 1) * local] - row * t
    return perm


def indexer_layout(ids: np.ndarray, cp: int, rank: int):
    """DSA's per-rank kernel segments for rows ``ids`` (no padding: ``cu_seqlens`` is the padded one)."""
    cu = thd_cu_seqlens_padded(ids)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu,
                             cu_seqlens_kv_padded=cu)
    cu_q, cu_kv = dsa_layout.get_packed_qk_cu_seqlens(params)
    return dsa_layout.build_packed_cp_indexer_layout(cu_q, cu_kv, cp_size=cp, cp_rank=rank, key_size=ids.size)


class _HeadTail:
    """head_tail's permutation through Megatron's THD split."""

    version = VERSION

    def validate_cp_layout(self, layout, problem):
        """Megatron's own check: DSA's host-side guard raises ValueError for a padded sequence whose
        length is not a multiple of 2*cp. It checks the sequences only; the sequences tile the row,
        so a row off cp always has one off 2*cp, which it names where the contract names the row
        first: that refusal is cp_not_divisible when the row is off cp (a convention mapped)."""
        check_layout_alone(layout)
        try:
            self.cp_permutation(layout, problem)
        except ValueError as e:
            row_off = rows_of(problem)[0].shape[1] % int(layout.cp) != 0
            raise AttnOracleError("cp_not_divisible" if row_off else "cp_document_not_divisible",
                                  f"Megatron-core: {e}") from None

    def cp_permutation(self, layout, problem):
        ids, _ = rows_of(problem)
        b, t = ids.shape
        cu = thd_cu_seqlens_padded(ids)
        return _per_row([rank_positions(cu, int(layout.cp), r, b * t // int(layout.cp)) for r in range(int(layout.cp))],
                        b, t)


class Backend(_HeadTail):
    """head_tail under all-gather CP: the split, and each rank's kernel segments mapped to its metadata."""

    name = "megatron-core-cp-thd"
    domain = cp_domain(cp_strategies=("all_gather",), cp_balances=("head_tail",), cp_sizes=(2, 3, 4, 8),
                       self_attention_only=True, extra_dims=False, mask_kinds=CAUSAL_KINDS)

    def unsupported_context_parallel(self, layout, problem):
        try:
            self.validate_cp_layout(layout, problem)
        except AttnOracleError:
            return None  # an invalid layout: each method gives its code (the split's refusal) first
        if int(layout.cp) < 2:
            return ("cp = 1: build_packed_cp_indexer_layout raises RuntimeError (\"packed CP indexer layout requires a "
                    "valid CP rank and cp_size > 1\")")
        return None

    def document_keys(self, kv_real: np.ndarray, start: int, length: int) -> int:
        """A segment's keys cut to its document's tokens (the actual cu_seqlens): how many of them."""
        return int(kv_real[start:start + length].sum())

    def cp_rank_metadata(self, layout, problem, rank, step):
        self.validate_cp_layout(layout, problem)
        reason = self.unsupported_context_parallel(layout, problem)
        if reason:
            raise Unsupported(reason)
        ids, _ = rows_of(problem)
        perm = self.cp_permutation(layout, problem)
        b, t = ids.shape
        # Which local query slot and which key of the stream is a document's token (not padding):
        # what the actual cu_seqlens, handed to the kernel beside the padded ones, say.
        q_real = (np.take_along_axis(ids, perm, 1) != 0).reshape(b, int(layout.cp), -1)[:, int(rank)].reshape(-1)
        kv_real = (ids != 0).reshape(-1)
        seg = indexer_layout(ids, int(layout.cp), int(rank))
        cu_q = seg.segment_cu_q.tolist()
        starts, lengths = seg.segment_key_starts.tolist(), seg.segment_k_lengths.tolist()
        q_spans, kv_spans = [], []
        for d in range(len(starts) // 2):  # segments 2d (front chunk) and 2d + 1 (back chunk): span d
            q_parts, kv_parts = [], []
            for i in (2 * d, 2 * d + 1):
                # A segment cut to the document's tokens (they come first in a span, its padding after).
                n_q = int(q_real[cu_q[i]:cu_q[i + 1]].sum())
                if n_q:
                    q_parts.append((cu_q[i], n_q))
                    kv_parts.append((starts[i], self.document_keys(kv_real, starts[i], lengths[i])))
            if q_parts:  # a span with no document token (leading padding) has no entry
                q_spans.append(union_span(q_parts))
                kv_spans.append(union_span(kv_parts))
        batch = rank_batch(layout, problem, perm, int(rank), int(step))
        md = packing.metadata_from_spans(batch, q_spans, kv_spans)
        return {k: md[k] for k in ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets", "cu_seqlens_q",
                                   "cu_seqlens_kv", "ragged_offsets_q", "ragged_offsets_kv")}


def per_sequence_rank(values: torch.Tensor, cp: int, rank: int) -> torch.Tensor:
    """``get_batch_on_this_cp_rank(..., use_per_sequence_balancing=True)`` on ``values`` [B, T] as
    rank ``rank`` of ``cp`` (a fake process group: rank and size, no data moved)."""
    with fake_process_group(rank, cp):
        batch = {"position_ids": values.clone(), "cu_seqlens": None}
        return _mutils.get_batch_on_this_cp_rank(batch, is_hybrid_cp=False,
                                                 use_per_sequence_balancing=True)["position_ids"]


class PerSequence:
    """dual_chunk_swap: Megatron's per-sequence zigzag split (pretraining without cu_seqlens, or
    ``use_per_sequence_balancing``), and the Mamba layer's redo / undo of it."""

    name, version = "megatron-core-cp-per-sequence", VERSION
    # all_to_all's precondition (heads a multiple of cp) is checked by TE's CUDA attention, not here.
    domain = cp_domain(cp_strategies=("all_gather", "ring"), cp_balances=("dual_chunk_swap",), cp_sizes=(1, 2, 3, 4, 8),
                       self_attention_only=True, extra_dims=False)

    def validate_cp_layout(self, layout, problem):
        """Megatron's own check: the per-sequence split views each row as 2*cp chunks, a RuntimeError
        for a row whose length is not a multiple of 2*cp."""
        check_layout_alone(layout)
        try:
            self.cp_permutation(layout, problem)
        except RuntimeError as e:
            raise AttnOracleError("cp_not_divisible", f"Megatron-core: {e}") from None

    def cp_permutation(self, layout, problem):
        ids, _ = rows_of(problem)
        b, t = ids.shape
        index = torch.arange(t, dtype=torch.int64).expand(b, t)
        return torch.cat([per_sequence_rank(index, int(layout.cp), r) for r in range(int(layout.cp))], dim=1).numpy()

    def cp_reorder(self, layout, problem, values, width, inverse):
        """Row order to rank-major (``inverse`` False) or back, by the Mamba CP layer's functions, which
        take the sequence first: [T, B, W]."""
        from megatron.core.ssm.mamba_context_parallel import (_redo_attention_load_balancing,
                                                              _undo_attention_load_balancing)

        seq_first = torch.from_numpy(np.ascontiguousarray(np.asarray(values).transpose(1, 0, 2)))
        fn = _undo_attention_load_balancing if inverse else _redo_attention_load_balancing
        return fn(seq_first, int(layout.cp)).numpy().transpose(1, 0, 2)
