"""A metadata-only K/V buffer backend for attn-oracle: micro-sequence
preprocessing from document lengths, in NumPy, and nothing else.

Served with ``python3 -m attn_oracle.worker
examples.numpy_kv_buffer_metadata_backend:Backend`` (docs/python.md, "The K/V
buffer"). A backend that defines ``kv_micro_sequence`` alone serves the
kv_buffer capability without its steps: the suite judges its metadata
(kv_buffer/metadataIsCanonical, kv_buffer/metadataDrivesAttentionLikeTheReference,
and kv_buffer/earlierDocumentsDoNotInfluence through the suite's own float64
kernel) and skips the properties that call kv_write_slice, kv_attend or
kv_stream. This is the first thing to check when porting a training stack's
micro-sequence code: 75 of the 135 lines of a first full backend were step
glue written before a single metadata field was checked.

``micro_sequence`` is the preprocessing itself; examples/torch_kv_buffer_backend.py
builds its steps on it. Tested by python_worker.kv_buffer_metadata_only_* (ctest)
and python/tests/test_kv_buffer_examples.py.
"""
import numpy as np

from attn_oracle.errors import AttnOracleError


def micro_sequence(doc_lengths, m: int, i: int) -> dict:
    """Micro-sequence i of ``m`` tokens over documents of ``doc_lengths`` tokens:
    queries [begin, end), keys [first_document_begin, end), the canonical metadata."""
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if lengths.size == 0 or (lengths < 1).any():
        raise AttnOracleError("kv_buffer_document_length", f"doc_lengths {lengths.tolist()}: each document needs a token")
    if m < 1:
        raise AttnOracleError("kv_buffer_micro_seq_tokens", f"micro_seq_tokens {m}: must be at least 1")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    n = int(starts[-1])
    count = -(-n // m)
    if not 0 <= i < count:  # also what kv_write_slice must say for a write past the last micro-sequence
        raise AttnOracleError("kv_buffer_slice_out_of_bounds", f"micro-sequence {i} of {count} (N = {n}, m = {m})")
    begin, end = i * m, min((i + 1) * m, n)
    first = int(np.searchsorted(starts, begin, side="right")) - 1  # the document holding token `begin`
    after = int(np.searchsorted(starts, end, side="left"))  # documents first..after-1 overlap [begin, end)
    fdb = int(starts[first])
    ends = np.minimum(starts[first + 1:after + 1], end)  # each document's last token + 1, cut at `end`
    q_tokens, kv_tokens = np.arange(begin, end), np.arange(fdb, end)
    q_doc = np.searchsorted(starts, q_tokens, side="right") - 1
    kv_doc = np.searchsorted(starts, kv_tokens, side="right") - 1
    return {
        "index": i, "begin": begin, "end": end, "first_document_begin": fdb,
        # Over the narrowed range: both start at 0, not at begin or first_document_begin.
        "cu_seqlens_q": np.concatenate([[0], ends - begin]),
        "cu_seqlens_k": np.concatenate([[0], ends - fdb]),
        "q_document": q_doc - first + 1, "q_position": q_tokens - starts[q_doc],
        "kv_document": kv_doc - first + 1, "kv_position": kv_tokens - starts[kv_doc],
    }


class Backend:
    name, version = "numpy-kv-buffer-metadata-example", "1"

    def kv_micro_sequence(self, problem, i):
        return micro_sequence(problem.doc_lengths, problem.micro_seq_tokens, i)
