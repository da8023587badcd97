"""A kv_buffer backend with its steps but no kv_micro_sequence: the worker must
refuse to greet with an error naming the missing method, and the suite must stop
with that error (exit 1), not skip kv_buffer in silence."""
from attn_oracle import serve


class Backend:
    name, version = "kv-steps-without-metadata", "0"

    def kv_write_slice(self, problem, i, slice, buffer):
        return buffer

    def kv_attend(self, problem, i, micro, buffer, grad_buffer):
        raise NotImplementedError


if __name__ == "__main__":
    serve(Backend())
