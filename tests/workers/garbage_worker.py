"""A worker that greets correctly, then answers a no_mask batch of 4 or more q tokens
with bytes that are no frame (as a stray print to stdout would): `check` must
report a protocol error for the case and restart the worker."""
import os
import sys

from attn_oracle import _protocol, worker
from examples import numpy_backend

if __name__ == "__main__":
    backend = numpy_backend.Backend()
    stdin, stdout = os.fdopen(0, "rb"), os.fdopen(1, "wb")
    _protocol.write_frame(stdout, worker.hello(backend))
    while (request := _protocol.read_frame(stdin)) is not None:
        header, arrays = request
        if header["op"] == "metadata" and header["batch"]["mask"] == "no_mask" and arrays["q_segment_ids"].shape[-1] >= 4:
            print("garbage_worker: writing garbage", file=sys.stderr, flush=True)
            stdout.write(b"Hello from a print() that went to stdout\n")
            stdout.flush()
            continue
        _protocol.write_frame(stdout, *worker.answer(backend, header, arrays))
