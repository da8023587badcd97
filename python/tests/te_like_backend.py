"""The NumPy example's metadata built the way TransformerEngine's JAX metadata
shipped (test_triage.py runs `check` on it): vmapped extra dims raise, a row
whose q or kv side has no tokens gets its offsets one too far (a shallow wrong
answer), and under the bottom-right masks every q token of a document is
counted, the leading ones that attend no key included (the deep bug: a wrong
answer on ordinary inputs)."""
import numpy as np

from examples import numpy_backend


class Backend(numpy_backend.Backend):
    name = "te-like"

    def metadata(self, b):
        if b.q_segment_ids.ndim > 2 or b.kv_segment_ids.ndim > 2:
            raise ValueError(f"segment ids of shape {b.q_segment_ids.shape}: expected [batch, seqlen]")
        out = super().metadata(b)
        for side in ("q", "kv"):
            empty = ~(getattr(b, f"{side}_segment_ids") != 0).any(-1)
            out[f"{side}_offsets"][empty] += 1
        if b.mask.endswith("bottom_right"):
            ids = np.broadcast_to(b.q_segment_ids, out["q_seqlens"].shape[:-1] + b.q_segment_ids.shape[-1:])
            for r in range(ids.shape[0]):
                doc = 0
                for k in range(b.max_segments):
                    if out["q_seqlens"][r, k] == 0:
                        continue
                    tokens = np.flatnonzero(ids[r] == k + 1)
                    out["q_seqlens"][r, k], out["q_offsets"][r, doc] = len(tokens), tokens[0]
                    doc += 1
        return out
