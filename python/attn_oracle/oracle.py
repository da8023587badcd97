"""The float64 oracle on NumPy arrays: metadata, explicit masks, attention, the K/V buffer.

Every function here runs the C++ reference of attn-oracle (``reference/``, the
same code ``attn-oracle eval`` runs) on NumPy arrays, with the semantics of
docs/semantics.md:

- A packed batch is two sides, q and kv, each with integer ``segment_ids`` of
  shape ``[..., B, T]`` (0 is padding, documents are ids 1..M in increasing
  order along a row) and ``segment_pos`` of a trailing suffix of that shape.
  The kv side defaults to the q side (self-attention). Leading ``...`` dims are
  vmapped extra batch dims; the two sides' extra dims broadcast.
- ``mask`` is one of ``no_mask``, ``padding``, ``causal``, ``padding_causal``,
  ``causal_bottom_right``, ``padding_causal_bottom_right``; ``window`` is
  ``(left, right)`` with a negative side unbounded; ``max_segments`` is M.
- Invalid input raises :class:`attn_oracle.AttnOracleError` with the stable code
  (``too_many_segments``, ``positions_not_increasing``, ...) and a message that
  names the row, token and values.

Tested by python/tests/test_oracle.py (against ``attn-oracle eval`` on the
fixtures) and, for the C++ underneath, by the project's ctest suite.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np

from . import _core
from .errors import AttnOracleError

from .domain import DTYPES, FRAMEWORK_DTYPE_NAMES, MASK_KINDS  # their one home


@dataclass(frozen=True)
class Metadata:
    """The metadata of docs/semantics.md#3-metadata, read off the explicit mask.

    ``*_seqlens`` are ``[..., B, M]`` (slot k: valid tokens of document k+1),
    ``*_offsets`` ``[..., B, M+1]`` (row-local first valid token of each
    document with valid tokens, in order, then -1). The compacted form covers the
    documents with valid tokens, rows in row-major order: ``cu_seqlens_*`` and
    ``ragged_offsets_*`` (global token index ``row * T + start``) of length S+1.
    """

    q_seqlens: np.ndarray
    kv_seqlens: np.ndarray
    q_offsets: np.ndarray
    kv_offsets: np.ndarray
    cu_seqlens_q: np.ndarray
    cu_seqlens_kv: np.ndarray
    ragged_offsets_q: np.ndarray
    ragged_offsets_kv: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        """The fields by name, as ``attn-oracle eval`` prints them for a metadata case."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class AttentionResult:
    """Float64 attention outputs in the input layouts.

    ``o`` is ``[..., B, Tq, Hq, D]``, ``lse`` ``[..., B, Hq, Tq]`` (natural log,
    ``-inf`` where a query attends nothing); with a ``do``, the gradients ``dq``
    (q's shape), ``dk`` and ``dv`` (k's shape). Tokens that attend nothing are
    exactly 0 in every output.
    """

    o: np.ndarray
    lse: np.ndarray
    dq: Optional[np.ndarray] = None
    dk: Optional[np.ndarray] = None
    dv: Optional[np.ndarray] = None

    def as_dict(self) -> dict[str, np.ndarray]:
        """The outputs by name (gradients only when computed)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class SmallSeqResult:
    """The small-sequence reference (docs/case-files.md, ``small_seq``): ``o`` as in attention and
    ``p = softmax(S)`` as ``[docs, Hq, 16]`` (0 past a document's keys) instead
    of ``lse``; gradients with a ``do``."""

    o: np.ndarray
    p: np.ndarray
    dq: Optional[np.ndarray] = None
    dk: Optional[np.ndarray] = None
    dv: Optional[np.ndarray] = None

    def as_dict(self) -> dict[str, np.ndarray]:
        """The outputs by name (gradients only when computed)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class MicroSequence:
    """One micro-sequence of a shared K/V buffer (docs/python.md, "The K/V buffer").

    Queries are tokens ``[begin, end)``; keys and values are buffer rows
    ``[first_document_begin, end)``, the start of the first document the
    micro-sequence overlaps. The metadata is over that narrowed range:
    ``cu_seqlens_q`` runs from 0 to ``end - begin``, ``cu_seqlens_k`` from 0 to
    ``end - first_document_begin``; ``q_document``/``kv_document`` number the
    documents 1..S, ``q_position``/``kv_position`` count from each document's
    own start (which may lie in an earlier micro-sequence).
    """

    index: int
    begin: int
    end: int
    first_document_begin: int
    cu_seqlens_q: np.ndarray
    cu_seqlens_k: np.ndarray
    q_document: np.ndarray
    q_position: np.ndarray
    kv_document: np.ndarray
    kv_position: np.ndarray

    def as_dict(self) -> dict:
        """The fields by name, as a kv_buffer backend's ``kv_micro_sequence`` returns them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------------------
# Argument conversion: the C++ side takes C-contiguous int64 / float64 arrays.
# ---------------------------------------------------------------------------

_INT64_MIN, _INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _int64(name: str, value, code: str = "bad_case") -> int:
    """An integer argument as the int64 the C++ side takes. Past int64 it gets the
    case reader's code and message (bad_case; bad_window for a window side), where
    nanobind would raise "incompatible function arguments" naming neither."""
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise AttnOracleError(code, f"{name}: expected an integer in int64 range, found {value}")
    return value


def _past_int64(value):
    """The first Python int past int64 in nested lists and tuples, or None."""
    if isinstance(value, (list, tuple)):
        return next((big for big in map(_past_int64, value) if big is not None), None)
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        return value
    return None


def _int_array(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.size == 0:
        return np.zeros(array.shape, dtype=np.int64)
    # NumPy reads a list holding a Python int past int64 as float64 or object.
    if array.dtype.kind in "fO" and (big := _past_int64(value)) is not None:
        raise AttnOracleError("bad_case", f"{name}: {big} does not fit in int64")
    if array.dtype.kind not in "iu":
        raise AttnOracleError("bad_case", f"{name}: expected integers, found an array of {array.dtype}")
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and int(array.max()) > _INT64_MAX:
        raise AttnOracleError("bad_case", f"{name}: {int(array.max())} does not fit in int64")
    return np.ascontiguousarray(array, dtype=np.int64)


def _float_array(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iuf" and array.dtype.name != "bfloat16":
        raise AttnOracleError("bad_case", f"{name}: expected numbers, found an array of {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float64)


def _window(window: Sequence[int], name: str = "window") -> tuple[int, int]:
    try:
        left, right = window
    except (TypeError, ValueError):
        raise AttnOracleError("bad_window", f"{name}: expected (left, right), found {window!r}") from None
    for side in (left, right):
        if isinstance(side, bool) or not isinstance(side, (int, np.integer)):
            raise AttnOracleError("bad_window", f"{name}: expected two integers, found {window!r}")
    return _int64(f"{name}[0]", left, "bad_window"), _int64(f"{name}[1]", right, "bad_window")


def _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments):
    if kv_segment_ids is None:
        kv_segment_ids = q_segment_ids
    if kv_segment_pos is None:
        kv_segment_pos = q_segment_pos
    if not isinstance(mask, str):
        raise AttnOracleError("bad_mask", f"mask: expected a string, found {mask!r}")
    if isinstance(max_segments, bool) or not isinstance(max_segments, (int, np.integer)):
        raise AttnOracleError("bad_max_segments", f"max_segments: expected an integer, found {max_segments!r}")
    return (
        _int_array("q_segment_ids", q_segment_ids),
        _int_array("q_segment_pos", q_segment_pos),
        _int_array("kv_segment_ids", kv_segment_ids),
        _int_array("kv_segment_pos", kv_segment_pos),
        mask,
        _window(window),
        _int64("max_segments", max_segments),
    )


def infer_dtype(array) -> str:
    """The device dtype a NumPy array stands for: fp16 for float16, bf16 for an
    ``ml_dtypes`` bfloat16, fp32 otherwise (float32, and float64 inputs)."""
    name = np.asarray(array).dtype.name
    return {numpy_name: ours for ours, numpy_name in FRAMEWORK_DTYPE_NAMES.items()}.get(name, "fp32")


# ---------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------


def metadata(
    q_segment_ids,
    q_segment_pos,
    kv_segment_ids=None,
    kv_segment_pos=None,
    *,
    mask: str,
    max_segments: int,
    window: Sequence[int] = (-1, -1),
) -> Metadata:
    """Validates the packed batch and derives every metadata integer from its explicit masks.

    >>> md = metadata([[1, 1, 1, 2, 2, 0, 0, 0]], [[0, 1, 2, 0, 1, 0, 0, 0]],
    ...               mask="padding_causal", max_segments=3)
    >>> md.q_seqlens.tolist(), md.cu_seqlens_q.tolist()
    ([[3, 2, 0]], [0, 3, 5])
    """
    args = _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return Metadata(**_core.metadata(*args))


def explicit_mask(
    q_segment_ids,
    q_segment_pos,
    kv_segment_ids=None,
    kv_segment_pos=None,
    *,
    mask: str,
    max_segments: int,
    window: Sequence[int] = (-1, -1),
    with_window: bool = True,
) -> np.ndarray:
    """The boolean attention mask ``[..., B, Tq, Tkv]`` of docs/semantics.md#2-the-attention-mask for every row.

    ``allowed[..., b, i, j]`` says whether query token i attends key token j:
    same document (id != 0), the causal or bottom-right term of the mask kind,
    and the window (``with_window=False`` leaves the window out: that is the
    mask the metadata is read from).
    """
    args = _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return _core.explicit_mask(*args, bool(with_window))


def representability(
    q_segment_ids,
    q_segment_pos,
    kv_segment_ids=None,
    kv_segment_pos=None,
    *,
    mask: str,
    max_segments: int,
    window: Sequence[int] = (-1, -1),
) -> tuple[bool, str]:
    """Whether kernels that see only the trimmed runs of each document (and
    apply the mask by index) compute the token-level mask of this batch
    (docs/semantics.md#2-the-attention-mask); when not, the second item names the first document and
    token pair that differs."""
    args = _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return _core.representability(*args)


def _tensor_args(q, k, v, do, dtype):
    dtype = infer_dtype(q) if dtype is None else dtype
    if dtype not in DTYPES:
        raise AttnOracleError("bad_case", f"dtype: expected one of {', '.join(DTYPES)}, found {dtype!r}")
    tensors = [_float_array(n, t) for n, t in (("q", q), ("k", k), ("v", v))]
    tensors.append(None if do is None else _float_array("do", do))
    return tensors, dtype


def attention(
    q,
    k,
    v,
    *,
    q_segment_ids,
    q_segment_pos,
    kv_segment_ids=None,
    kv_segment_pos=None,
    mask: str,
    max_segments: int,
    window: Sequence[int] = (-1, -1),
    do=None,
    scale: Optional[float] = None,
    dtype: Optional[str] = None,
    method: str = "dense",
) -> AttentionResult:
    """Float64 attention (and, given ``do``, its gradients) of a packed batch.

    ``q`` is ``[..., B, Tq, Hq, D]``, ``k`` and ``v`` ``[..., B, Tkv, Hkv, D]``
    with ``...`` the broadcast extra dims of the ids; ``Hq % Hkv == 0`` (query
    head h reads kv head ``h // (Hq // Hkv)``). ``scale`` defaults to
    ``1/sqrt(D)``. The inputs are first rounded to ``dtype`` (``fp32``,
    ``fp16`` or ``bf16``; default: inferred from ``q``'s dtype, see
    :func:`infer_dtype`), so the reference computes what a device of that
    dtype was asked to compute. ``method="dense"`` is the ground truth (every
    row against its explicit mask); ``"per_document"`` runs each compacted
    document with the kernels' index rule, and agrees on representable inputs.
    """
    tensors, dtype = _tensor_args(q, k, v, do, dtype)
    args = _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return AttentionResult(**_core.attention(*tensors, *args, dtype, scale, method))


def small_seq(
    q,
    k,
    v,
    *,
    q_segment_ids,
    q_segment_pos,
    kv_segment_ids=None,
    kv_segment_pos=None,
    mask: str,
    max_segments: int,
    window: Sequence[int] = (-1, -1),
    do=None,
    scale: Optional[float] = None,
    dtype: Optional[str] = None,
) -> SmallSeqResult:
    """The small-sequence reference: one query per document, 1..16 keys (else
    ``small_seq_query_count`` / ``small_seq_key_count``); arguments as in
    :func:`attention`."""
    tensors, dtype = _tensor_args(q, k, v, do, dtype)
    args = _batch_args(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return SmallSeqResult(**_core.small_seq(*tensors, *args, dtype, scale))


def kv_buffer_metadata(doc_lengths, micro_seq_tokens: int) -> list[MicroSequence]:
    """The canonical metadata of every micro-sequence of ``micro_seq_tokens`` tokens
    over documents of ``doc_lengths`` tokens, in order (item i is micro-sequence i).

    >>> ms = kv_buffer_metadata([4, 1, 10], 4)
    >>> ms[1].first_document_begin, ms[1].cu_seqlens_k.tolist()
    (4, [0, 1, 4])
    """
    lengths = _int_array("doc_lengths", doc_lengths)
    return [MicroSequence(**d) for d in _core.kv_buffer_metadata(lengths, int(micro_seq_tokens))]


def kv_buffer_stream(
    q,
    k,
    v,
    *,
    doc_lengths,
    micro_seq_tokens: int,
    do=None,
    scale: Optional[float] = None,
    dtype: Optional[str] = None,
) -> AttentionResult:
    """The streaming run of a shared K/V buffer in float64: every slice written,
    micro-sequences attended in order, the backward in reverse into one gradient
    buffer. ``q`` is ``[N, Hq, D]``, ``k`` and ``v`` ``[N, Hkv, D]`` (N the sum of
    ``doc_lengths``), ``do`` like ``q``. Returns ``o`` ``[N, Hq, D]``, ``lse``
    ``[Hq, N]`` and, given ``do``, ``dq`` and ``dk``/``dv`` read off the final
    gradient buffer: what a backend's ``kv_stream`` returns, and equal to
    per-document causal attention over the whole sequence. Inputs are rounded to
    ``dtype`` first, as in :func:`attention`.
    """
    tensors, dtype = _tensor_args(q, k, v, do, dtype)
    lengths = _int_array("doc_lengths", doc_lengths)
    return AttentionResult(**_core.kv_buffer_stream(*tensors, lengths, int(micro_seq_tokens), dtype, scale))


def memory_budget() -> int:
    """Bytes one evaluation may ask for (``ATTN_ORACLE_MEMORY_BUDGET``, default 4 GiB)."""
    return _core.memory_budget()


def set_memory_budget(num_bytes: int) -> None:
    """Overrides the memory budget for this process; larger inputs raise ``over_memory_budget``."""
    _core.set_memory_budget(_int64("num_bytes", num_bytes))
