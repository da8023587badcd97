"""numpy_context_parallel_backend with a planted bug a ring implementation can have:
the K/V blocks passed the other way round the ring, so that at step s rank r meets
the keys of rank (r + s) mod cp instead of (r - s) mod cp.

Over all cp steps every rank still meets every rank's keys, and merging by lse does
not care in which order, so the merged output is right. What is wrong is each
step's kernel call: the metadata a rank hands its kernel at step s describes other
keys than the ones a (r - s) ring delivers then, which is what a schedule that skips
the steps a causal mask leaves empty, or a kernel reading the K/V buffer received at
that step, relies on. The suite judges every rank's metadata at every step, so a
context_parallel case with cp >= 3 and a ring fails (for cp = 2 the two directions
are one). ctest and python/tests/test_context_parallel_worker.py require it to.
"""
from . import numpy_context_parallel_backend


class Backend(numpy_context_parallel_backend.Backend):
    name = "numpy-context-parallel-example-planted"

    def source_rank(self, layout, rank, step):
        return (rank + step) % layout.cp if layout.strategy == "ring" else rank  # planted: the ring turns the other way
