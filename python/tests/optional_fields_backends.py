"""Backends for test_optional_fields.py: the NumPy example returning the optional
metadata fields (right, and wrong the ways stacks get them wrong), and returning
lse rounded to the input dtype (declared, and not)."""
import numpy as np

from attn_oracle import packing
from examples import numpy_backend


class WithOptionalMetadata(numpy_backend.Backend):
    name = "numpy-optional-metadata"

    def metadata(self, b):
        out = super().metadata(b)
        derived = packing.metadata_from_documents(b, packing.documents(b))
        return out | {k: derived[k] for k in ("max_seqlen_q", "max_seqlen_kv", "indices_q", "indices_kv")}


class MaxSeqlenOfPaddedRows(WithOptionalMetadata):
    """max_seqlen taken as the row length (padding counted), as a collator that pads does."""

    def metadata(self, b):
        out = super().metadata(b)
        out["max_seqlen_q"] = np.asarray(b.q_segment_ids).shape[-1] if out["indices_q"].size else 0
        return out


class IndicesWithKvStride(WithOptionalMetadata):
    """indices_kv strided by Tq, the unpad of a stack that assumes Tq == Tkv."""

    def metadata(self, b):
        out = super().metadata(b)
        tq, tkv = np.asarray(b.q_segment_ids).shape[-1], np.asarray(b.kv_segment_ids).shape[-1]
        out["indices_kv"] = out["indices_kv"] // max(tkv, 1) * tq + out["indices_kv"] % max(tkv, 1)
        return out


def bf16(x):  # round-to-nearest-even to bfloat16, kept in float64 (inf stays inf)
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


class LseInInputDtype(numpy_backend.Backend):
    """lse stored in the problem's dtype, as jax.nn and MaxText return it."""

    name, lse_dtype = "numpy-lse-in-input-dtype", "input"

    def attention(self, p, x):
        out = super().attention(p, x)
        if p.dtype == "bf16":
            out["lse"] = bf16(out["lse"])
        elif p.dtype == "fp16":
            out["lse"] = out["lse"].astype(np.float16).astype(np.float64)
        return out


class LseInInputDtypeUndeclared(LseInInputDtype):
    name = "numpy-lse-in-input-dtype-undeclared"
    lse_dtype = "float32"
