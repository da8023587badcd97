"""examples/torch_kv_buffer_backend.py with a real stack's mistake planted:
each micro-sequence's ``cu_seqlens_k`` starts at ``first_document_begin``
instead of 0 (offsets into the whole buffer, not into the narrowed view), and
its attend reads K/V from buffer row 0 so that the offsets still land on the
right keys.

On clean data the outputs are right, so kv_buffer/streamingMatchesWholeSequence
and kv_buffer/stepsMatchModel pass; the suite finds it three ways:
kv_buffer/metadataIsCanonical (cu_seqlens_k[0] is not 0),
kv_buffer/metadataDrivesAttentionLikeTheReference (a varlen kernel reading keys
at first_document_begin + cu_seqlens_k reads the wrong rows) and
kv_buffer/earlierDocumentsDoNotInfluence (NaN in the documents before
first_document_begin reaches o through the masked scores of the wider view).
Each shrinks to two one-token documents with one-token micro-sequences.
Tested by python_worker.torch_kv_buffer_planted_fails_and_replays (ctest) and
python/tests/test_kv_buffer_examples.py.
"""
from examples.torch_kv_buffer_backend import Backend as TorchKvBufferBackend


class Backend(TorchKvBufferBackend):
    name = "planted-torch-kv-buffer-example"

    def kv_micro_sequence(self, problem, i):
        md = super().kv_micro_sequence(problem, i)
        md["cu_seqlens_k"] = md["cu_seqlens_k"] + md["first_document_begin"]  # the planted bug
        return md

    def kv_view(self, md):
        return 0, md["cu_seqlens_k"]  # rows [0, end): where offsets from first_document_begin point
