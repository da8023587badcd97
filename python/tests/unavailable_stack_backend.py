"""A stack module whose library is not installed (test_stacks.py runs `check` on it)."""
from attn_oracle.stacks import require

library = require("Some Stack", "attn_oracle_no_such_library", "no-such-library", ("1.0",))


class Backend:
    def metadata(self, batch):
        raise AssertionError("never served")
