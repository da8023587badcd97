"""Convention adapters: other stacks' attention arguments to and from our packed batch.

Each stack gets a pair of functions, ``*_to_batch`` (their arguments in, our
batch out) and ``*_from_batch`` (our batch in, their arguments out). Our batch is
a dict whose keys are the batch arguments of :mod:`attn_oracle.oracle`
(``q_segment_ids``, ``q_segment_pos``, ``kv_segment_ids``, ``kv_segment_pos``,
``mask``, ``window``, ``max_segments``), so ``oracle.metadata(**batch)`` and
``oracle.attention(q, k, v, **batch)`` take it as it is.

The adapters run the C++ ones (``adapters/`` in the repository): a conversion
is exact or refused. An input a stack cannot express (our top-left causal on a
document with more keys than queries, for FlashAttention) raises
:class:`attn_oracle.AttnOracleError` with code ``unsupported`` and a message
naming the row, document and first query that would attend differently;
malformed arguments raise ``bad_metadata`` or ``bad_window``.
docs/conventions.md has the tables and a worked example per stack.

>>> batch = flash_attention_to_batch([0, 2], [0, 3], causal=True)
>>> batch["mask"], batch["q_segment_ids"].tolist(), batch["kv_segment_ids"].tolist()
('causal_bottom_right', [[1, 1]], [[1, 1, 1]])
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as _np

from . import _core
from .packing import positions_from_starts
from .domain import is_causal, mask_kind
from .errors import AttnOracleError
from .oracle import _batch_args, _int64, _int_array, _window

__all__ = [
    "flash_attention_to_batch", "flash_attention_from_batch", "cudnn_to_batch", "cudnn_from_batch",
    "sdpa_to_batch", "sdpa_from_batch", "flex_document_mask_to_batch", "flex_document_mask_from_batch",
    "transformer_engine_thd_to_batch", "transformer_engine_thd_from_batch", "transformer_engine_mask_kind",
]


def _ints(name: str, values) -> list[int]:
    return [int(v) for v in _int_array(name, values).reshape(-1)]


def _optional_int64(name: str, value: Optional[int]) -> Optional[int]:
    return None if value is None else _int64(name, value)


def _from(batch) -> tuple:
    """A batch dict, or any object with those fields (a worker's ``Batch``, as the stack modules hold)."""
    if not isinstance(batch, dict):
        batch = {k: getattr(batch, k) for k in ("q_segment_ids", "q_segment_pos", "kv_segment_ids", "kv_segment_pos",
                                                "mask", "window", "max_segments")}
    return _batch_args(batch["q_segment_ids"], batch["q_segment_pos"], batch.get("kv_segment_ids"),
                       batch.get("kv_segment_pos"), batch["mask"], tuple(batch.get("window", (-1, -1))),
                       batch["max_segments"])


# ---------------------------------------------------------------- FlashAttention
def flash_attention_to_batch(cu_seqlens_q, cu_seqlens_k, max_seqlen_q: Optional[int] = None,
                             max_seqlen_k: Optional[int] = None, *, causal: bool = False,
                             window_size: Sequence[int] = (-1, -1), version: str = "fa3") -> dict:
    """``flash_attn_varlen_func``'s mask arguments as one row of our model.

    ``causal=True`` is FlashAttention's bottom-right causal (our
    ``causal_bottom_right``); a ``-1`` window side is unbounded in ``"fa3"`` and
    ``max_seqlen_k`` in ``"fa2"``. ``max_seqlen_*`` default to the longest document.
    """
    cu_q, cu_k = _ints("cu_seqlens_q", cu_seqlens_q), _ints("cu_seqlens_k", cu_seqlens_k)
    longest = lambda cu: max((b - a for a, b in zip(cu, cu[1:])), default=0)  # noqa: E731
    max_q = longest(cu_q) if max_seqlen_q is None else _int64("max_seqlen_q", max_seqlen_q)
    max_k = longest(cu_k) if max_seqlen_k is None else _int64("max_seqlen_k", max_seqlen_k)
    return _core.flash_to_batch(cu_q, cu_k, max_q, max_k, bool(causal), _window(window_size, "window_size"), version)


def flash_attention_from_batch(batch: dict, *, version: str = "fa3") -> dict:
    """Our batch as a ``flash_attn_varlen_func`` call.

    Returns ``cu_seqlens_q``, ``cu_seqlens_k``, ``max_seqlen_q``, ``max_seqlen_k``,
    ``causal``, ``window_size`` and the gather indices ``q_tokens`` / ``kv_tokens``:
    FlashAttention's packed token ``t`` is our flat token ``q_tokens[t]`` of the
    ``[R * Tq]`` token axis (gather q with them, scatter the outputs back; tokens
    left out attend nothing: ``o = 0``).
    """
    return _core.flash_from_batch(*_from(batch), version)


# ---------------------------------------------------------------- cuDNN
def cudnn_to_batch(seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, *, diagonal_alignment: str = "top_left",
                   left_bound: Optional[int] = None, right_bound: Optional[int] = None,
                   q_elements_per_token: int = 1, kv_elements_per_token: int = 1) -> dict:
    """cuDNN ragged SDPA's attributes as one row of our model.

    The left bound is exclusive (cuDNN ``left_bound`` = our window left + 1);
    ``right_bound=0`` is causal under the alignment. Ragged offsets are in
    elements; ``*_elements_per_token`` (H x D for cuDNN's own tensors) turns them
    into tokens.
    """
    return _core.cudnn_to_batch(_ints("seq_len_q", seq_len_q), _ints("seq_len_kv", seq_len_kv),
                                _ints("ragged_offset_q", ragged_offset_q), _ints("ragged_offset_kv", ragged_offset_kv),
                                _int64("q_elements_per_token", q_elements_per_token),
                                _int64("kv_elements_per_token", kv_elements_per_token), diagonal_alignment,
                                _optional_int64("left_bound", left_bound), _optional_int64("right_bound", right_bound))


def cudnn_from_batch(batch: dict, *, q_elements_per_token: int = 1, kv_elements_per_token: int = 1) -> dict:
    """Our batch as cuDNN ragged SDPA attributes on our own ``[R, T, H, D]`` tensors.

    Returns ``seq_len_q``, ``seq_len_kv``, ``ragged_offset_q``, ``ragged_offset_kv``
    (offsets in elements: token x ``*_elements_per_token``), ``diagonal_alignment``,
    ``left_bound`` and ``right_bound`` (``None`` when unset).
    """
    return _core.cudnn_from_batch(*_from(batch), _int64("q_elements_per_token", q_elements_per_token),
                                  _int64("kv_elements_per_token", kv_elements_per_token))


# ---------------------------------------------------------------- PyTorch
def sdpa_to_batch(batch: int, q_len: int, kv_len: int, *, causal: str = "none") -> dict:
    """``scaled_dot_product_attention`` on ``[batch, H, q_len, D]``: ``causal`` is
    ``"none"``, ``"is_causal"`` (top-left: our ``causal``) or ``"causal_lower_right"``
    (our ``causal_bottom_right``)."""
    return _core.sdpa_to_batch(_int64("batch", batch), _int64("q_len", q_len), _int64("kv_len", kv_len), causal)


def sdpa_from_batch(batch: dict) -> dict:
    """Our batch as an SDPA call (``batch``, ``q_len``, ``kv_len``, ``causal``): one
    document per row filling it; anything else is refused."""
    return _core.sdpa_from_batch(*_from(batch))


def flex_document_mask_to_batch(document_id, *, causal: bool = False, sliding_window: int = -1,
                                window_right: int = -1) -> dict:
    """A flex-attention document mask (``document_id [B, T]``: -1 padding, else 0, 1, ...
    one run each) with an optional causal term (``q_idx >= kv_idx``) and window:
    ``q_idx - kv_idx <= sliding_window`` and ``kv_idx - q_idx <= window_right``
    (-1: that side unbounded); our window is ``(sliding_window, window_right)``."""
    return _core.flex_to_batch(_int_array("document_id", document_id), bool(causal),
                               _int64("sliding_window", sliding_window), _int64("window_right", window_right))


def flex_document_mask_from_batch(batch: dict) -> dict:
    """Our batch as a flex-attention document mask (``document_id``, ``causal``,
    ``sliding_window``, ``window_right``): self-attention, any mask kind (bottom-right is
    causal when every document is as long on both sides), any window."""
    return _core.flex_from_batch(*_from(batch))


# ---------------------------------------------------------------- TransformerEngine
def transformer_engine_mask_kind(attn_mask_type: str) -> str:
    """Our mask kind for TransformerEngine's ``attn_mask_type`` (the names are ours)."""
    return _core.te_mask_kind(attn_mask_type)


def transformer_engine_thd_to_batch(attn_mask_type: str, cu_seqlens_q, cu_seqlens_kv, *,
                                    window_size: Sequence[int] = (-1, -1), cu_seqlens_q_padded=(),
                                    cu_seqlens_kv_padded=()) -> dict:
    """TransformerEngine's THD arguments (``cu_seqlens_*`` of valid tokens and, with
    padding between documents, ``cu_seqlens_*_padded``) as one row of our model."""
    return _core.te_thd_to_batch(attn_mask_type, _window(window_size, "window_size"),
                                 _ints("cu_seqlens_q", cu_seqlens_q), _ints("cu_seqlens_kv", cu_seqlens_kv),
                                 _ints("cu_seqlens_q_padded", cu_seqlens_q_padded),
                                 _ints("cu_seqlens_kv_padded", cu_seqlens_kv_padded))


def transformer_engine_thd_from_batch(batch: dict) -> dict:
    """Our batch as TransformerEngine THD arguments (``attn_mask_type``, ``window_size``,
    ``cu_seqlens_q``, ``cu_seqlens_kv``, ``cu_seqlens_q_padded``, ``cu_seqlens_kv_padded``)."""
    return _core.te_thd_from_batch(*_from(batch))


# ---- Megatron-core


def _megatron_rows(name: str, values, seq_length: Optional[int]) -> list[list[int]]:
    """Rows of prefix sums: a 1-D array is one row; a 2-D one is Megatron's per-sample layout, each row
    right-padded with copies of its last value (``seq_length``), which are dropped after the first."""
    import numpy as np

    a = _int_array(name, values)
    if a.ndim not in (1, 2) or a.shape[-1] < 1:
        raise AttnOracleError("bad_metadata", f"{name} has shape {list(a.shape)}: [S+1] or per sample [B, K]")
    rows = []
    for r, row in enumerate(np.atleast_2d(a).tolist()):
        end = row[-1] if seq_length is None else int(seq_length)
        if a.ndim == 2 and end in row:
            row = row[:row.index(end) + 1]
        if row[0] != 0 or any(b < a_ for a_, b in zip(row, row[1:])):
            raise AttnOracleError("bad_metadata", f"{name} row {r} is {row}: prefix sums from 0, never decreasing")
        rows.append(row)
    return rows


def megatron_packed_to_batch(cu_seqlens, cu_seqlens_padded=None, *, seq_length: Optional[int] = None,
                             causal: bool = True) -> dict:
    """Megatron-core's packed-sequence metadata as our batch: one row per sample.

    ``cu_seqlens``: the prefix sums of the documents' tokens, either flat ``[S+1]``
    (``PackedSeqParams.cu_seqlens_q``: one row, or rows of ``seq_length`` tokens when
    it is given) or per sample ``[B, K]`` as Megatron's GPT and SFT datasets collate
    them (each row right-padded with copies of ``seq_length``, the padding
    ``flatten_batch_for_packed_sequences`` strips). ``cu_seqlens_padded`` (same
    layout, optional): where each document starts and ends once padded (context
    parallelism pads each to a multiple); document s holds ``cu_seqlens[s+1] -
    cu_seqlens[s]`` tokens from ``cu_seqlens_padded[s]`` and padding after them.
    Documents number 1, 2, ... in each row, positions restart at 0, padding has id 0;
    the mask is ``causal`` (``no_mask`` when ``causal=False``), with the ``padding``
    kinds when there is padding. Refused (``bad_metadata``): prefix sums not from 0 or
    decreasing, a padded document shorter than its tokens, mismatched shapes, a flat
    document crossing a row of ``seq_length`` tokens.

    >>> b = megatron_packed_to_batch([0, 3, 5], [0, 4, 6])
    >>> b["mask"], b["q_segment_ids"].tolist(), b["q_segment_pos"].tolist()
    ('padding_causal', [[1, 1, 1, 0, 2, 2]], [[0, 1, 2, 0, 0, 1]])
    """
    import numpy as np

    flat = np.ndim(cu_seqlens) == 1
    rows = _megatron_rows("cu_seqlens", cu_seqlens, None if flat else seq_length)
    padded = rows if cu_seqlens_padded is None else _megatron_rows("cu_seqlens_padded", cu_seqlens_padded,
                                                                   None if flat else seq_length)
    if len(padded) != len(rows) or any(len(p) != len(c) for p, c in zip(padded, rows)):
        raise AttnOracleError("bad_metadata", "cu_seqlens and cu_seqlens_padded describe different documents")
    spans = []  # per row: (start, tokens, padded length)
    for r, (cu, pad) in enumerate(zip(rows, padded)):
        row = []
        for s in range(len(cu) - 1):
            n, width = cu[s + 1] - cu[s], pad[s + 1] - pad[s]
            if width < n:
                raise AttnOracleError("bad_metadata", f"row {r} document {s}: {n} tokens in a padded length of {width}")
            row.append((pad[s], n, width))
        spans.append(row)
    if flat and seq_length is not None:  # one flat stream of rows of seq_length tokens
        t = int(seq_length)
        if t < 1:
            raise AttnOracleError("bad_metadata", f"seq_length {t}: must be at least 1")
        total = padded[0][-1]
        split = [[] for _ in range(max(1, -(-total // t)))]
        for start, n, width in spans[0]:
            row, local = divmod(start, t)
            if width and (start + width - 1) // t != row:
                raise AttnOracleError("bad_metadata", f"a document over tokens [{start}, {start + width}) crosses "
                                      f"the row boundary at a multiple of seq_length {t}")
            split[min(row, len(split) - 1)].append((local, n, width))
        spans, length = split, t
    else:
        length = max((p[-1] for p in padded), default=0) if seq_length is None else int(seq_length)
    ids = np.zeros((len(spans), length), np.int64)
    pos = np.zeros((len(spans), length), np.int64)
    for r, row in enumerate(spans):
        for s, (start, n, width) in enumerate(row):
            if start + width > length:
                raise AttnOracleError("bad_metadata", f"row {r} document {s} ends at {start + width}, past {length}")
            ids[r, start:start + n] = s + 1
            pos[r, start:start + n] = np.arange(n)
    return {"q_segment_ids": ids, "q_segment_pos": pos, "kv_segment_ids": ids.copy(), "kv_segment_pos": pos.copy(),
            "mask": mask_kind(padding=bool((ids == 0).any()), causal=bool(causal)), "window": (-1, -1), "max_segments": max(1, max(len(row) for row in spans))}


__all__ += ["megatron_packed_to_batch"]


# ---- Hugging Face transformers
# Pure Python: transformers' packed-sequence conventions (docs/stacks.md,
# "Hugging Face transformers"). Its two paths read packed position_ids by two
# rules that disagree:
#   "flash": prepare_fa_kwargs_from_position_ids flattens position_ids and starts
#            a document wherever the position equals their minimum; the flash path
#            packs only for B = 1 (_is_packed_sequence), so with B > 1 each row is
#            one sequence;
#   "sdpa":  find_packed_sequence_indices (create_causal_mask and the other masks
#            of masking_utils, the SDPA, eager and flex paths) starts a document
#            wherever the position does not step by 1 from the token before.
# [0, 1, 2, 5, 6] is one document by the first rule and two by the second.


__all__ += ["transformers_position_ids_to_batch", "transformers_position_ids_from_batch",
            "transformers_attention_mask_to_batch", "TRANSFORMERS_PACKING_RULES"]

TRANSFORMERS_PACKING_RULES = ("flash", "sdpa")


def _transformers_starts(position_ids: _np.ndarray, rule: str) -> _np.ndarray:
    """[B, T] bool: where transformers starts a document under ``rule``."""
    b, t = position_ids.shape
    starts = _np.zeros((b, t), bool)
    if t == 0:
        return starts
    if rule == "flash":
        if b == 1:  # tokens before the first minimum are in no document (cu_seqlens starts past them)
            starts[0] = position_ids[0] == position_ids.min()
        else:  # B > 1: no packing, each row one sequence
            starts[:, 0] = True
    elif rule == "sdpa":
        starts[:, 0] = True
        starts[:, 1:] = _np.diff(position_ids, axis=1) != 1
    else:
        raise AttnOracleError("bad_case", f"rule {rule!r}: one of {', '.join(TRANSFORMERS_PACKING_RULES)}")
    return starts


def _transformers_window(causal: bool, sliding_window) -> tuple:
    if sliding_window is None:
        return (-1, -1)
    w = int(sliding_window)
    if w < 1:
        raise AttnOracleError("bad_window", f"sliding_window = {w}: transformers takes a window of >= 1 tokens")
    # masking_utils: kv_idx > q_idx - sliding_window, i.e. q - kv <= sliding_window - 1 (the
    # flash path's window_size = (sliding_window - 1, sliding_window - 1) says the same under causal).
    return (w - 1, -1) if causal else (w - 1, w - 1)


def transformers_position_ids_to_batch(position_ids, *, rule: str = "sdpa", causal: bool = True,
                                       sliding_window=None) -> dict:
    """transformers' packed ``position_ids [B, T]`` (self-attention, no padding) as our batch.

    ``rule``: ``"sdpa"`` (a document starts where the position does not step by 1:
    masking_utils.find_packed_sequence_indices) or ``"flash"`` (where it equals the
    minimum, only for B = 1: prepare_fa_kwargs_from_position_ids; with B > 1 each row
    is one sequence). Documents get ids 1, 2, ... per row and positions 0, 1, ... (both
    paths mask by index within a document). ``causal`` (transformers' decoders) gives
    ``causal``, else ``no_mask``; ``sliding_window`` (``config.sliding_window``, W
    tokens including the query) gives our window ``(W - 1, -1)`` (``(W - 1, W - 1)``
    bidirectional).
    """
    pos = _int_array("position_ids", position_ids)
    if pos.ndim == 1:
        pos = pos[None]
    if pos.ndim != 2:
        raise AttnOracleError("rank_mismatch", f"position_ids has shape {list(pos.shape)}: transformers takes [B, T]")
    starts = _transformers_starts(pos, rule)
    ids = _np.cumsum(starts, axis=1).astype(_np.int64)
    seg_pos = _np.where(ids != 0, positions_from_starts(starts), 0)
    return {"q_segment_ids": ids, "q_segment_pos": seg_pos, "kv_segment_ids": ids.copy(),
            "kv_segment_pos": seg_pos.copy(), "mask": mask_kind(padding=bool((ids == 0).any()), causal=bool(causal)),
            "window": _transformers_window(causal, sliding_window), "max_segments": max(1, int(ids.max(initial=0)))}


def transformers_position_ids_from_batch(batch: dict, *, rule: str = "sdpa") -> dict:
    """Our batch as transformers' packed ``position_ids`` (``position_ids``, ``causal``,
    ``sliding_window``), or refused (``unsupported``) where transformers would read other
    documents under ``rule``, or a mask it has no packed form for.

    Takes self-attention without padding or extra dims, a causal (top-left; bottom-right
    is the same on self-attention) or ``no_mask`` kind, positions from 0 in each document,
    and a window transformers' ``sliding_window`` says (``(W - 1, -1)`` causal).
    """
    qi, qp, ki, kp, mask, window, m = _from(batch)
    qi, qp = _np.asarray(qi), _np.broadcast_to(_np.asarray(qp), _np.asarray(qi).shape)
    kp = _np.broadcast_to(_np.asarray(kp), _np.asarray(ki).shape)
    refuse = lambda why: AttnOracleError("unsupported", f"transformers' packed position_ids: {why}")  # noqa: E731
    if qi.ndim != 2 or not _np.array_equal(qi, ki) or not _np.array_equal(qp, kp):
        raise refuse("self-attention on [B, T] only (one position_ids tensor for q and kv)")
    if (qi == 0).any():
        raise refuse("no padding in a packed row")
    causal = is_causal(mask)
    if mask not in ("causal", "causal_bottom_right", "no_mask"):
        raise refuse(f"mask {mask}: packed rows are causal or bidirectional")
    left, right = window
    if (left, right) == (-1, -1) or (causal and left >= 0):
        sliding = None if left < 0 else left + 1
    elif not causal and left >= 0 and left == right:
        sliding = left + 1
    else:
        raise refuse(f"window ({left}, {right}): transformers' sliding_window is (W - 1, -1) causal, (W - 1, W - 1) bidirectional")
    position_ids = _np.ascontiguousarray(qp, dtype=_np.int64)
    back = transformers_position_ids_to_batch(position_ids, rule=rule, causal=causal)
    for r in range(qi.shape[0]):
        ours_start = _np.r_[True, qi[r, 1:] != qi[r, :-1]] if qi.shape[1] else _np.zeros(0, bool)
        theirs_start = _np.r_[True, back["q_segment_ids"][r, 1:] != back["q_segment_ids"][r, :-1]] if qi.shape[1] else ours_start
        differ = _np.flatnonzero(ours_start != theirs_start)
        if differ.size:
            t = int(differ[0])
            raise refuse(f"row {r}, token {t}: a document {'starts' if ours_start[t] else 'goes on'} here, but the "
                         f"{rule} rule reads position {int(position_ids[r, t])} as "
                         f"{'a start' if theirs_start[t] else 'going on'}")
        if not _np.array_equal(qp[r], back["q_segment_pos"][r]):
            t = int(_np.flatnonzero(qp[r] != back["q_segment_pos"][r])[0])
            raise refuse(f"row {r}, token {t}: position {int(qp[r, t])}, but transformers counts positions from 0 "
                         f"in each document")
    return {"position_ids": position_ids, "causal": causal, "sliding_window": sliding}


def transformers_attention_mask_to_batch(attention_mask, *, causal: bool = True) -> dict:
    """transformers' 2D ``attention_mask [B, T]`` (1 valid, 0 padding; left-padded for
    generation) as our batch: one document per row over its valid tokens, positions 0, 1,
    ... over them (``position_ids = cumsum(mask) - 1``), ``padding_causal`` (or
    ``padding``). A row whose valid tokens are not one run is refused (``unsupported``):
    the unpad path (_get_unpad_data) would join them into one sequence."""
    am = _int_array("attention_mask", attention_mask)
    if am.ndim != 2:
        raise AttnOracleError("rank_mismatch", f"attention_mask has shape {list(am.shape)}: transformers takes [B, T]")
    valid = am != 0
    for r in range(am.shape[0]):
        edges = _np.flatnonzero(_np.diff(_np.r_[0, valid[r].astype(_np.int8), 0]))
        if len(edges) > 2:
            raise AttnOracleError("unsupported", f"row {r}: valid tokens at {int(edges[0])}..{int(edges[1]) - 1} and "
                                                  f"from {int(edges[2])} on: the unpad path joins them into one sequence")
    ids = valid.astype(_np.int64)
    pos = _np.where(valid, _np.cumsum(valid, axis=1) - 1, 0).astype(_np.int64)
    return {"q_segment_ids": ids, "q_segment_pos": pos, "kv_segment_ids": ids.copy(), "kv_segment_pos": pos.copy(),
            "mask": mask_kind(padding=True, causal=bool(causal)), "window": (-1, -1), "max_segments": 1}
