"""Batch helpers for a backend's glue: the reference's answers, in the shapes a stack wants.

Most of what a backend for another stack has to write is the same for every
user: broadcast the rows, find the tokens the reference counts, turn document
spans into the metadata fields. These do it once, from the reference itself, so
a backend's own code is only the mapping of its stack.

``batch`` is the worker's :class:`attn_oracle.worker.Batch` or the dict the
adapters return (the keyword arguments of :func:`attn_oracle.metadata`).

>>> b = {"q_segment_ids": [[1, 1, 2, 0]], "q_segment_pos": [[0, 1, 0, 0]],
...      "mask": "padding_causal", "max_segments": 2}
>>> [(d.row, d.segment, d.q_start, d.q_len) for d in documents(b)]
[(0, 1, 0, 2), (0, 2, 2, 1)]
>>> metadata_from_documents(b, documents(b))["indices_q"].tolist()
[0, 1, 2]
>>> metadata_from_spans(b, spans_from_cu_seqlens([0, 2, 3]))["q_seqlens"].tolist()
[[2, 1]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from . import oracle

__all__ = ["Rows", "Document", "batch_arguments", "check", "rows", "valid_tokens", "documents",
           "metadata_from_documents", "metadata_from_spans", "cu_seqlens", "spans_from_cu_seqlens", "span_tokens",
           "positions_from_starts"]


@dataclass(frozen=True)
class Rows:
    """Ids and positions broadcast over the extra leading dims and flattened to ``[R, T]``."""

    extra: tuple[int, ...]  # the broadcast extra dims; R = prod(extra) * batch_size
    batch_size: int  # B
    q_ids: np.ndarray
    q_pos: np.ndarray
    kv_ids: np.ndarray
    kv_pos: np.ndarray


@dataclass(frozen=True)
class Document:
    """One document's valid tokens on each side of its row (docs/semantics.md#3-metadata)."""

    row: int  # flat row of [R, T]
    segment: int  # its segment id
    q_start: int  # row-local first valid query token
    q_len: int
    kv_start: int
    kv_len: int


def _get(batch: Any, name: str, default=None):
    return batch.get(name, default) if isinstance(batch, dict) else getattr(batch, name, default)


def batch_arguments(batch: Any) -> dict:
    """The batch as keyword arguments of :func:`attn_oracle.metadata` (kv defaults to q)."""
    q_ids, q_pos = _get(batch, "q_segment_ids"), _get(batch, "q_segment_pos")
    kv_ids, kv_pos = _get(batch, "kv_segment_ids"), _get(batch, "kv_segment_pos")
    return {"q_segment_ids": q_ids, "q_segment_pos": q_pos,
            "kv_segment_ids": q_ids if kv_ids is None else kv_ids, "kv_segment_pos": q_pos if kv_pos is None else kv_pos,
            "mask": _get(batch, "mask"), "max_segments": _get(batch, "max_segments"),
            "window": tuple(_get(batch, "window", (-1, -1)))}


def check(batch: Any) -> oracle.Metadata:
    """Raise :class:`attn_oracle.AttnOracleError` (the reference's code and message)
    for an invalid batch; return the reference's metadata for a valid one."""
    args = batch_arguments(batch)
    return oracle.metadata(args.pop("q_segment_ids"), args.pop("q_segment_pos"), **args)


def rows(batch: Any, *, validate: bool = True) -> Rows:
    """Ids and positions of both sides as ``[R, T]`` (checked first: an invalid batch raises;
    ``validate=False`` for a batch the caller has checked already)."""
    if validate:
        check(batch)
    return _rows(batch)


def _rows(batch: Any) -> Rows:  # rows() of a batch already checked
    a = batch_arguments(batch)
    q_ids, kv_ids = np.asarray(a["q_segment_ids"], np.int64), np.asarray(a["kv_segment_ids"], np.int64)
    extra = tuple(np.broadcast_shapes(q_ids.shape[:-2], kv_ids.shape[:-2]))

    def side(ids, pos):  # [R, T], not (-1, T): T may be 0
        shape = extra + ids.shape[-2:]
        flat = (int(np.prod(shape[:-1])), shape[-1])
        return [np.broadcast_to(np.asarray(x, np.int64), shape).reshape(flat) for x in (ids, pos)]

    q = side(q_ids, a["q_segment_pos"])
    kv = side(kv_ids, a["kv_segment_pos"])
    return Rows(extra, int(q_ids.shape[-2]), q[0], q[1], kv[0], kv[1])


def documents(batch: Any) -> list[Document]:
    """Every document with valid tokens, in the order of ``cu_seqlens`` (rows in row-major order)."""
    return _documents(check(batch), _rows(batch))


def _documents(md: oracle.Metadata, r: Rows) -> list[Document]:
    tq, tkv = r.q_ids.shape[1], r.kv_ids.shape[1]
    out = []
    for s in range(len(md.cu_seqlens_q) - 1):
        gq, gkv = int(md.ragged_offsets_q[s]), int(md.ragged_offsets_kv[s])
        row, q_start, kv_start = gq // tq, gq % tq, gkv % tkv
        out.append(Document(row, int(r.q_ids[row, q_start]), q_start, int(md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s]),
                            kv_start, int(md.cu_seqlens_kv[s + 1] - md.cu_seqlens_kv[s])))
    return out


def valid_tokens(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(q_valid [R, Tq], kv_valid [R, Tkv])``: the tokens the reference counts in the metadata."""
    md, r = check(batch), _rows(batch)
    q_valid, kv_valid = np.zeros(r.q_ids.shape, bool), np.zeros(r.kv_ids.shape, bool)
    for d in _documents(md, r):
        q_valid[d.row, d.q_start:d.q_start + d.q_len] = True
        kv_valid[d.row, d.kv_start:d.kv_start + d.kv_len] = True
    return q_valid, kv_valid


def positions_from_starts(starts) -> np.ndarray:
    """[R, T] int64: each token's index within its document, the documents starting where ``starts``
    [R, T] is True (a token before a row's first start counts from the row's token 0)."""
    starts = np.asarray(starts, bool)
    index = np.arange(starts.shape[-1], dtype=np.int64)
    return index - np.maximum.accumulate(np.where(starts, index, 0), axis=-1)


def cu_seqlens(lengths) -> np.ndarray:
    """The prefix sums of sequence lengths from 0, int64 ``[S+1]``: what varlen calls take."""
    return np.cumsum(np.concatenate([[0], np.asarray(lengths, np.int64).reshape(-1)]), dtype=np.int64)


def span_tokens(starts, lengths) -> np.ndarray:
    """The flat tokens of spans (start, length) in order, as int64: what a varlen call gathers."""
    return np.concatenate([np.arange(int(a), int(a) + int(n), dtype=np.int64) for a, n in zip(starts, lengths)]
                          or [np.zeros(0, np.int64)])


def spans_from_cu_seqlens(cu_seqlens, starts=None) -> list[tuple[int, int]]:
    """(start, length) of each sequence of prefix sums ``cu_seqlens`` [S+1]: sequence k has
    ``cu[k+1] - cu[k]`` tokens from flat token ``starts[k]`` (default ``cu[k]``: no gap between them)."""
    cu = [int(c) for c in np.asarray(cu_seqlens).reshape(-1)]
    return [(cu[k] if starts is None else int(starts[k]), cu[k + 1] - cu[k]) for k in range(len(cu) - 1)]


def metadata_from_spans(batch: Any, q_spans: Iterable[tuple[int, int]],
                        kv_spans: Iterable[tuple[int, int]] | None = None) -> dict[str, np.ndarray]:
    """Every metadata field, the optional ones included, from the spans a stack gave on each side.

    A span is (flat start ``row * T + t``, length) on the side's ``[R * T]`` token axis, in
    ``cu_seqlens`` order (``kv_spans`` default to ``q_spans``: one packing for both sides of
    self-attention). Its slot is the segment id at its first token; one that starts on
    padding fills no slot of ``*_seqlens``. A wrong span shows as wrong fields; one that
    does not fit the batch's rows (or more than M + 1 of a row) raises ``ValueError``.
    """
    r = rows(batch)
    spans = {"q": list(q_spans)}
    spans["kv"] = spans["q"] if kv_spans is None else list(kv_spans)

    def with_slots(ids, side_spans):  # (row, segment, row-local start, length); a row past R is -1
        t = ids.shape[1]
        out = []
        for start, length in side_spans:
            row, local = divmod(int(start), t) if t else (-1, 0)
            segment = int(ids[row, local]) if 0 <= row < ids.shape[0] and 0 <= local < t else 0
            out.append((row, segment, local, int(length)))
        return out

    return _metadata(batch, r, with_slots(r.q_ids, spans["q"]), with_slots(r.kv_ids, spans["kv"]))


def metadata_from_documents(batch: Any, spans: Iterable[Document]) -> dict[str, np.ndarray]:
    """Every metadata field, the optional ones included, from document spans a stack produced.

    ``spans`` in ``cu_seqlens`` order (rows in row-major order, documents in
    row order). A backend that gets only its stack's ``cu_seqlens`` (and where
    each document starts) fills the per-slot fields with this; a span the stack
    got wrong shows up as a wrong field, never as an exception here, unless it
    does not fit the batch's shape (then ``ValueError``).
    """
    r = rows(batch)
    m, n_rows = int(_get(batch, "max_segments")), r.q_ids.shape[0]
    spans = list(spans)
    for d in spans:
        if not (0 <= d.row < n_rows and 1 <= d.segment <= m):
            raise ValueError(f"document {d} does not fit {n_rows} rows of M = {m}")
    return _metadata(batch, r, [(d.row, d.segment, d.q_start, d.q_len) for d in spans],
                     [(d.row, d.segment, d.kv_start, d.kv_len) for d in spans])


def _metadata(batch: Any, r: Rows, q_spans: list, kv_spans: list) -> dict[str, np.ndarray]:
    """The fields of both sides from their spans (row, segment, row-local start, length)."""
    m, n_rows = int(_get(batch, "max_segments")), r.q_ids.shape[0]
    shape = lambda a: a.reshape(r.extra + (r.batch_size, a.shape[1]))  # noqa: E731
    out = {}
    for side, spans, t in (("q", q_spans, r.q_ids.shape[1]), ("kv", kv_spans, r.kv_ids.shape[1])):
        seqlens, offsets, starts, lengths = _side_metadata(spans, n_rows, t, m)
        out[f"{side}_seqlens"], out[f"{side}_offsets"] = shape(seqlens), shape(offsets)
        out[f"cu_seqlens_{side}"] = cu_seqlens(lengths)
        out[f"ragged_offsets_{side}"] = np.asarray(starts + [n_rows * t], np.int64)
        out[f"max_seqlen_{side}"] = int(max(lengths, default=0))
        out[f"indices_{side}"] = span_tokens(starts, lengths)
    return out


def _side_metadata(spans, n_rows: int, t: int, m: int):
    """One side's [R, M] seqlens, [R, M+1] offsets, and each span's flat start and length.
    A span's segment outside 1..M fills no slot (a wrong field shows it); a row outside the
    batch, or a row's (M+2)-th span, has no place at all: ValueError."""
    seqlens, offsets = np.zeros((n_rows, m), np.int64), np.full((n_rows, m + 1), -1, np.int64)
    filled = np.zeros(n_rows, np.int64)
    starts, lengths = [], []
    for row, segment, start, length in spans:
        if not (0 <= row < n_rows and filled[row] < m + 1):
            raise ValueError(f"a span of {length} tokens from token {start} of row {row} does not fit {n_rows} rows "
                             f"of {t} tokens with M = {m} (at most M + 1 spans a row)")
        if 1 <= segment <= m:
            seqlens[row, segment - 1] = length
        offsets[row, filled[row]] = start
        filled[row] += 1
        starts.append(row * t + start)
        lengths.append(length)
    return seqlens, offsets, starts, lengths
