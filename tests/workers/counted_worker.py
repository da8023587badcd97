"""A worker that appends its pid to the file $ATTN_ORACLE_TEST_STARTS names and
then serves MODULE:CLASS as `python -m attn_oracle.worker MODULE:CLASS` does:
a count of the worker's starts that does not rest on the suite's own count
(tests/python_worker.cmake, one_worker_per_run and restarts_after_crash)."""
import os
import sys

from attn_oracle import worker

if __name__ == "__main__":
    with open(os.environ["ATTN_ORACLE_TEST_STARTS"], "a") as starts:
        starts.write(f"{os.getpid()}\n")
    sys.exit(worker.main())
