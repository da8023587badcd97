"""A worker whose backend never answers a batch of 4 or more q tokens: under a
short ATTN_ORACLE_WORKER_TIMEOUT `check` must fail the case, keep this stderr
line, and stop the property instead of shrinking through more hangs."""
import sys
import time

from attn_oracle.worker import serve
from examples import numpy_backend


class Backend(numpy_backend.Backend):
    def metadata(self, batch):
        if batch.q_segment_ids.shape[-1] >= 4:
            print("hanging_worker: sleeping instead of answering", file=sys.stderr, flush=True)
            time.sleep(3600)
        return super().metadata(batch)


if __name__ == "__main__":
    serve(Backend())
