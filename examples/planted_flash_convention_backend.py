"""flash_convention_backend with FlashAttention's causal read top-left (``j <= i``
instead of ``j <= i + lk - lq``): right wherever a document has as many keys as
queries, wrong elsewhere. python/tests/test_adapters.py requires `check` to fail
on it with a shrunk case.
"""
from . import flash_convention_backend


class Backend(flash_convention_backend.Backend):
    name = "flash-convention-example-planted"
    bottom_right = False  # planted: causal=True taken as top-left
