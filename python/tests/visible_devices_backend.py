"""The NumPy example, noting the CUDA_VISIBLE_DEVICES its worker was started with
(in $ATTN_ORACLE_TEST_DEVICE_LOG, a line per worker): what `check --devices`
gives each worker, seen from a worker (test_cli.py)."""
import os

from examples import numpy_backend


class Backend(numpy_backend.Backend):
    def __init__(self):
        super().__init__()
        with open(os.environ["ATTN_ORACLE_TEST_DEVICE_LOG"], "a") as log:
            log.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + "\n")
