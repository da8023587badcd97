"""One backend before and after its fix: the NumPy example with the planted
bottom-right bug of examples/planted_numpy_backend.py while
ATTN_ORACLE_TEST_BUG=1, the example itself otherwise, under one name and
version, as a kernel fixed between two runs is (test_store.py)."""
import os

from examples import numpy_backend, planted_numpy_backend


class Backend(planted_numpy_backend.Backend):
    name, version = "numpy-example-toggled", "1"

    def causal(self, kind, d, shift):
        if os.environ.get("ATTN_ORACLE_TEST_BUG") == "1":
            return super().causal(kind, d, shift)
        return numpy_backend.Backend.causal(self, kind, d, shift)
