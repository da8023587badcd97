"""cudnn_convention_backend with cuDNN's left bound taken as inclusive (``c >=
r + shift - L`` instead of ``c > ...``): one key too many on the left of every
bounded band. python/tests/test_adapters.py requires `check` to fail on it with
a shrunk case.
"""
from . import cudnn_convention_backend


class Backend(cudnn_convention_backend.Backend):
    name = "cudnn-convention-example-planted"
    left_bound_exclusive = False  # planted: the left bound not shifted
