"""A worker whose hello declares a domain with a mask kind that does not exist
(written raw: attn_oracle.Domain would refuse it): the suite must stop with a
clear error naming the key (exit 1), not crash."""
import os

from attn_oracle import _protocol

if __name__ == "__main__":
    stdout = os.fdopen(1, "wb")
    _protocol.write_frame(stdout, {"protocol": "attn-oracle-worker/1", "name": "bad-domain", "version": "0",
                                   "capabilities": ["metadata"], "domain": {"mask_kinds": ["causal", "sideways"]}})
    os.fdopen(0, "rb").read()
