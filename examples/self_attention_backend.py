"""A self-attention-only backend in the shape of transformers' packed path.

transformers, Megatron-core and flex attention packing code take one batch for
q and kv, no padding, and positions that restart at 0 in every document;
``cu_seqlens`` come from where the positions restart. This backend computes its
metadata that way, per row, so it is right only inside that domain, and says
so with ``domain``: the suite then draws inside it and judges (almost) every
draw instead of declining the cross-attention, padded and offset ones.
Attention is numpy_backend's, and like it, this example declines invalid
inputs rather than validating them. Served with ``python3 -m attn_oracle.worker
examples.self_attention_backend:Backend``; python/tests/test_domain.py checks it.
"""
import numpy as np

from attn_oracle import Domain
from . import numpy_backend


class Backend(numpy_backend.Backend):
    name, version, token_level_mask = "self-attention-example", "1", False
    domain = Domain(self_attention_only=True, no_padding=True, positions_from_zero=True, extra_dims=False,
                    mask_kinds=("causal", "no_mask"), windows=False)

    def metadata(self, b):
        self.rows(b)  # declines an invalid batch: like numpy_backend, this example does not validate
        ids, pos, m = b.q_segment_ids, np.broadcast_to(b.q_segment_pos, b.q_segment_ids.shape), b.max_segments
        rows, t = ids.shape
        seqlens, offsets = np.zeros((rows, m), np.int64), np.full((rows, m + 1), -1, np.int64)
        cu, ragged = [0], []
        for r in range(rows):
            starts = np.flatnonzero(pos[r] == 0)  # a document starts where its positions restart
            lengths = np.diff(np.append(starts, t))
            seqlens[r, ids[r, starts] - 1], offsets[r, : len(starts)] = lengths, starts
            cu += list(cu[-1] + np.cumsum(lengths))
            ragged += list(r * t + starts)
        return {"q_seqlens": seqlens, "kv_seqlens": seqlens, "q_offsets": offsets, "kv_offsets": offsets,
                "cu_seqlens_q": cu, "cu_seqlens_kv": cu, "ragged_offsets_q": ragged + [rows * t],
                "ragged_offsets_kv": ragged + [rows * t]}
