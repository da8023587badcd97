"""A worker whose backend aborts on a no_mask batch of 4 or more q tokens (the
numpy example otherwise): `check` must report the crash as a failure of the
case, shrunk to 4 tokens, with this stderr line in the report."""
import os
import sys

from attn_oracle.worker import serve
from examples import numpy_backend


class Backend(numpy_backend.Backend):
    def metadata(self, batch):
        if batch.mask == "no_mask" and batch.q_segment_ids.shape[-1] >= 4:
            print(f"crashing_worker: aborting on {batch.q_segment_ids.shape[-1]} q tokens", file=sys.stderr, flush=True)
            os.abort()
        return super().metadata(batch)


if __name__ == "__main__":
    serve(Backend())
