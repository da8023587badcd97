"""A worker that greets with a protocol version this build does not speak:
the suite must stop with a clear error naming both versions (exit 1)."""
import os

from attn_oracle import _protocol

if __name__ == "__main__":
    stdout = os.fdopen(1, "wb")
    _protocol.write_frame(stdout, {"protocol": "attn-oracle-worker/0", "name": "old", "version": "0",
                                   "capabilities": ["metadata"]})
    os.fdopen(0, "rb").read()
