"""examples/numpy_kv_buffer_metadata_backend.py with cu_seqlens_k counted from
first_document_begin (the planted torch twin's bug) and no steps: the metadata
properties must fail it through the Python worker, the attend of
kv_buffer/earlierDocumentsDoNotInfluence being the suite's own kernel."""
from attn_oracle import serve
from examples.numpy_kv_buffer_metadata_backend import Backend as MetadataBackend


class Backend(MetadataBackend):
    name = "planted-kv-metadata"

    def kv_micro_sequence(self, problem, i):
        md = super().kv_micro_sequence(problem, i)
        md["cu_seqlens_k"] = md["cu_seqlens_k"] + md["first_document_begin"]
        return md


if __name__ == "__main__":
    serve(Backend())
