"""The NumPy example backend, recording the shapes it is called with: one line
per attention call, "Bq Tq Tkv Hq Hkv D", appended to $ATTN_ORACLE_TEST_SHAPES.
What a jitted backend would compile for (tests/test_shape_stable.py)."""
import os

from attn_oracle import Domain
from examples.numpy_backend import Backend as NumpyBackend


class Backend(NumpyBackend):
    name = "numpy-shape-recording"

    def attention(self, p, x):
        with open(os.environ["ATTN_ORACLE_TEST_SHAPES"], "a") as log:
            rows, tq, hq, d = x.q.shape  # [R, Tq, Hq, D]; k and v [R, Tkv, Hkv, D]
            print(rows, tq, x.k.shape[1], hq, x.k.shape[2], d, file=log)
        return super().attention(p, x)


MENU = {"tokens": [32, 96], "rows": [2], "max_segments": [8], "heads": [[4, 2]]}


class MenuBackend(Backend):
    """Declares the sizes it was compiled for: every call is on them."""
    name = "numpy-declared-menu"
    domain = Domain(extra_dims=False, head_dims=(16,), sizes=MENU)
