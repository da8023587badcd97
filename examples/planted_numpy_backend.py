"""numpy_backend with a planted bug a real stack had: bottom-right causal anchored
at the top-left of each document (the `causal` branch taken for *_bottom_right),
which only shows where a document's q and kv lengths differ. ctest requires
`check` to fail on it, shrink the case and replay it (python_worker.planted_*).
"""
from . import numpy_backend


class Backend(numpy_backend.Backend):
    name = "numpy-example-planted"

    def causal(self, kind, d, shift):
        return super().causal(kind.replace("_bottom_right", ""), d, shift)  # planted: drops the alignment
