"""Frames of the attn-oracle worker protocol, version ``attn-oracle-worker/1``.

docs/protocol.md is the specification; this module and seam/src/worker_protocol.cpp
are its two implementations. A frame is::

    b"AOW1" | u32 little-endian header length | header (JSON) | payload

where ``header["arrays"]`` lists ``[name, dtype, shape]`` triples (dtype one of
i64, i32, f64, f32, f16) and the payload is their raw little-endian bytes back
to back, in that order. Pure Python and NumPy: importable without any compiled
module. Tested end to end by the ctest ``python_worker.*`` tests.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np

PROTOCOL = "attn-oracle-worker/1"
MAGIC = b"AOW1"
MAX_HEADER_BYTES = 16 << 20

_WIRE_DTYPES = {"i64": np.dtype("<i8"), "i32": np.dtype("<i4"), "f64": np.dtype("<f8"),
                "f32": np.dtype("<f4"), "f16": np.dtype("<f2")}
_WIRE_NAMES = {dtype: name for name, dtype in _WIRE_DTYPES.items()}
_PREFIX = struct.Struct("<4sI")


class ProtocolError(Exception):
    """A frame that does not follow docs/protocol.md."""


def _read_exactly(stream, n: int) -> bytearray | None:
    """n bytes, or None at a clean end of stream before the first byte."""
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
        chunk = stream.readinto(view[got:])
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"the stream ended {n - got} bytes short of a frame")
        got += chunk
    return buffer


def read_frame(stream) -> tuple[dict, dict[str, np.ndarray]] | None:
    """The next (header, arrays) from a binary stream, or None at its end.

    The arrays are writable views of one buffer, shaped as the header says.
    """
    prefix = _read_exactly(stream, _PREFIX.size)
    if prefix is None:
        return None
    magic, length = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise ProtocolError(f"expected a frame starting with {MAGIC!r}, got {bytes(prefix)!r}")
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"a header of {length} bytes (the limit is {MAX_HEADER_BYTES})")
    header = json.loads(_read_exactly(stream, length) or b"")
    if not isinstance(header, dict):
        raise ProtocolError("the header is not a JSON object")
    layout, total = [], 0
    for name, dtype_name, shape in header.get("arrays", ()):
        dtype = _WIRE_DTYPES.get(dtype_name)
        if dtype is None:
            raise ProtocolError(f"array {name} has dtype {dtype_name!r}")
        count = math.prod(shape)
        layout.append((name, dtype, tuple(shape), total, count))
        total += count * dtype.itemsize
    payload = _read_exactly(stream, total) if total else bytearray()
    if payload is None:
        raise ProtocolError("the stream ended before the arrays")
    arrays = {name: np.frombuffer(payload, dtype, count, offset).reshape(shape)
              for name, dtype, shape, offset, count in layout}
    return header, arrays


def wire_array(value) -> np.ndarray:
    """A value as an array of a wire dtype: integers as i64/i32, floats as f64/f32/f16."""
    a = np.asarray(value)
    if a.dtype in _WIRE_NAMES and a.flags.c_contiguous:  # the common case, no copy
        return a
    if a.dtype.newbyteorder("<") in _WIRE_NAMES:
        return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    if a.dtype.kind in "iub":
        return np.ascontiguousarray(a, dtype="<i8")
    if a.dtype.kind == "f" and a.dtype.itemsize < 4:  # bfloat16 (ml_dtypes) and other narrow floats
        return np.ascontiguousarray(a, dtype="<f4")
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a, dtype="<f8")
    raise ProtocolError(f"cannot send an array of dtype {a.dtype}")


def write_frame(stream, header: dict, arrays: dict[str, object] | None = None) -> None:
    """One frame: header plus arrays (anything np.asarray takes), then a flush."""
    parts, listing = [], []
    for name, value in (arrays or {}).items():
        a = wire_array(value)
        listing.append([name, _WIRE_NAMES[a.dtype], list(a.shape)])
        parts.append(a.data if a.size else b"")
    if listing:
        header = {**header, "arrays": listing}
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    stream.write(b"".join([_PREFIX.pack(MAGIC, len(text)), text, *parts]))
    stream.flush()
