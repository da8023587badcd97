"""The NumPy example in a module that prints on import, as some libraries do (a
banner, a notice written to stdout from Python or from C): the worker must keep
that off the protocol stream (test_worker_stdout.py)."""
import os

print("printing_backend: a banner printed at import", flush=True)
os.write(1, b"printing_backend: a line written to fd 1 at import\n")

from examples import numpy_backend  # noqa: E402


class Backend(numpy_backend.Backend):
    name = "numpy-example-printing"
