"""Case files (docs/case-files.md) as Python objects with NumPy arrays.

A case file is one problem for one op (``metadata``, ``attention``,
``small_seq``, ``kv_buffer``, ``sharding``), optionally with the property check
that failed on it and the result the reference must give. Reading, validating
and writing are the C++ code of ``attn-oracle`` itself, so a file this module
accepts is one the CLI accepts and a file it writes is laid out as the CLI
writes it (schema ``attn-oracle.case/2``).

In a :class:`Case`, every nested list of numbers becomes a NumPy array (int64
when every entry is an integer, float64 otherwise, with ``"-inf"`` / ``"inf"``
/ ``"nan"`` strings read as those floats); everything else stays as JSON
gives it. Writing turns the arrays back into lists.

Tested by python/tests/test_cases.py (round trips of every fixture, the bad
inputs' codes, evaluation against ``attn-oracle eval``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

from . import _core
from .oracle import _batch_args, _tensor_args

ENVELOPE_KEYS = ("schema", "op", "note", "property", "expected")
_NON_FINITE = {"-inf": -math.inf, "inf": math.inf, "nan": math.nan}

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------------
# JSON <-> Python with NumPy arrays
# ---------------------------------------------------------------------------


def _leaves_are_numbers(value) -> bool:
    if isinstance(value, list):
        return all(_leaves_are_numbers(v) for v in value)
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or value in _NON_FINITE


def _as_array(value: list) -> Optional[np.ndarray]:
    """A rectangular list of numbers as an array; None for anything else."""
    if not value:
        return np.zeros((0,), dtype=np.int64)
    try:
        array = np.array(value)
    except ValueError:  # ragged
        return None
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind in "iu":
        return array.astype(np.int64, copy=False) if array.dtype.kind == "i" else array
    if array.dtype.kind == "f":
        return array.astype(np.float64, copy=False)
    if array.dtype.kind == "U" and _leaves_are_numbers(value):
        return np.array(value, dtype=np.float64)
    return None


def from_json(value: Any) -> Any:
    """JSON values with every nested list of numbers made a NumPy array."""
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        array = _as_array(value)
        return array if array is not None else [from_json(v) for v in value]
    return value


def _finite_or_name(x):
    if isinstance(x, list):
        return [_finite_or_name(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def to_json(value: Any) -> Any:
    """The inverse of :func:`from_json`: arrays as nested lists, non-finite floats as strings."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        nested = value.tolist()
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            nested = _finite_or_name(nested)
        return nested
    if isinstance(value, np.generic):
        return to_json(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return _finite_or_name(value)
    return value


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class Case:
    """One case: its op, the op's fields (``mask``, ``q``, ``tensors``, ...),
    and the envelope (``note``, the failed ``property`` record, ``expected``).

    ``path`` is where it was read from, if anywhere. Compare cases with
    :meth:`to_dict` (NumPy arrays have no single truth value).
    """

    op: str
    fields: dict[str, Any]
    note: str = ""
    property: Optional[dict[str, Any]] = None
    expected: Optional[dict[str, Any]] = None
    path: Optional[Path] = field(default=None, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Optional[PathLike] = None) -> "Case":
        """A case from a case file's JSON object (arrays or lists; ``schema``
        defaults to the current one), validated by the C++ reader."""
        data = {"schema": _core.CASE_SCHEMA, **data}
        text = _core.normalize_case(json.dumps(to_json(data), allow_nan=False))
        return cls._from_canonical(json.loads(text), path)

    @classmethod
    def _from_canonical(cls, data: dict[str, Any], path: Optional[PathLike]) -> "Case":
        data = from_json(data)
        return cls(
            op=data["op"],
            fields={k: v for k, v in data.items() if k not in ENVELOPE_KEYS},
            note=data.get("note", ""),
            property=data.get("property"),
            expected=data.get("expected"),
            path=Path(path) if path is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The case file's JSON object (lists, not arrays), schema ``attn-oracle.case/2``."""
        data: dict[str, Any] = {"schema": _core.CASE_SCHEMA, "op": self.op}
        if self.note:
            data["note"] = self.note
        data.update(to_json(self.fields))
        if self.property is not None:
            data["property"] = to_json(self.property)
        if self.expected is not None:
            data["expected"] = to_json(self.expected)
        return data

    def to_json_text(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)

    def write(self, path: PathLike) -> None:
        """Writes the case as the CLI does (validated first; parent directories created)."""
        _core.write_case(os.fspath(path), self.to_json_text())

    def inputs(self) -> dict[str, np.ndarray]:
        """The tensors an ``attention`` or ``small_seq`` case is evaluated on:
        generated from its ``data`` seed, or its ``tensors`` rounded to its dtype
        (``q``, ``k``, ``v`` and, with backward, ``do``)."""
        return _core.case_inputs(self.to_json_text())

    def eval(self) -> dict[str, Any]:
        """What ``attn-oracle eval`` prints for this case on the reference, with
        NumPy arrays; a rejected input raises AttnOracleError with its code."""
        return from_json(json.loads(_core.eval_case(self.to_json_text())))


def read_case(path: PathLike) -> Case:
    """Reads and validates a case file; a malformed one raises AttnOracleError
    (``bad_case``, ``bad_mask``, ``bad_window``, ``bad_tensor_shape``) naming the field."""
    return Case._from_canonical(json.loads(_core.read_case(os.fspath(path))), path)


def write_case(case: Case, path: PathLike) -> None:
    """Writes ``case`` to ``path`` (see :meth:`Case.write`)."""
    case.write(path)


def iter_case_paths(directory: PathLike, pattern: str = "*.case.json") -> list[Path]:
    """The case files under ``directory`` (recursively), sorted."""
    return sorted(p for p in Path(directory).rglob(pattern) if p.is_file())


def iter_cases(directory: PathLike, pattern: str = "*.case.json") -> Iterator[Case]:
    """Reads every case file under ``directory`` (recursively, sorted by path),
    e.g. the repository's ``fixtures/``; an unreadable one raises."""
    for path in iter_case_paths(directory, pattern):
        yield read_case(path)


def eval_case(case: Union[Case, PathLike]) -> dict[str, Any]:
    """:meth:`Case.eval` of a case or a case file."""
    return (case if isinstance(case, Case) else read_case(case)).eval()


# ---------------------------------------------------------------------------
# Cases from arrays
# ---------------------------------------------------------------------------


def _batch_fields(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments):
    q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments = _batch_args(
        q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments
    )
    return {
        "mask": mask,
        "window": list(window),
        "max_segments": max_segments,
        "q": {"segment_ids": q_ids, "segment_pos": q_pos},
        "kv": {"segment_ids": kv_ids, "segment_pos": kv_pos},
    }


def metadata_case(
    q_segment_ids, q_segment_pos, kv_segment_ids=None, kv_segment_pos=None, *, mask, max_segments,
    window=(-1, -1), note: str = "",
) -> Case:
    """A ``metadata`` case of a packed batch (arguments as in :func:`attn_oracle.oracle.metadata`)."""
    fields = _batch_fields(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    return Case.from_dict({"schema": _core.CASE_SCHEMA, "op": "metadata", "note": note, **fields})


def attention_case(
    q, k, v, *, q_segment_ids, q_segment_pos, kv_segment_ids=None, kv_segment_pos=None, mask, max_segments,
    window=(-1, -1), do=None, scale=None, dtype=None, op: str = "attention", note: str = "",
) -> Case:
    """An ``attention`` (or ``op="small_seq"``) case with explicit tensors
    (arguments as in :func:`attn_oracle.oracle.attention`); the tensors are kept
    as given and rounded to ``dtype`` when evaluated, as the CLI does."""
    (q, k, v, do), dtype = _tensor_args(q, k, v, do, dtype)
    fields = _batch_fields(q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos, mask, window, max_segments)
    fields.update(heads_q=q.shape[-2] if q.ndim >= 2 else 0, heads_kv=k.shape[-2] if k.ndim >= 2 else 0,
                  head_dim=q.shape[-1] if q.ndim >= 1 else 0, dtype=dtype, backward=do is not None)
    if scale is not None:
        fields["scale"] = float(scale)
    fields["tensors"] = {"q": q, "k": k, "v": v, **({"do": do} if do is not None else {})}
    return Case.from_dict({"schema": _core.CASE_SCHEMA, "op": op, "note": note, **fields})
