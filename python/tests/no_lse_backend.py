"""The NumPy example without lse, as a backend built on torch's SDPA is: it says
so with ``outputs`` (test_worker_outputs.py runs `check` on it)."""
from examples import numpy_backend


class Backend(numpy_backend.Backend):
    name, outputs = "numpy-example-no-lse", ("gradients",)

    def attention(self, p, x):
        out = super().attention(p, x)
        del out["lse"]
        return out
