"""Planted twin of attn_oracle.stacks.hf_transformers: packed rows merged for B > 1.

transformers' flash path packs only for one row: ``_is_packed_sequence`` is
False when B > 1, and each row is then one sequence, whatever its
position_ids say. A mapping that follows that gate (rather than flattening
the rows to one, as DataCollatorWithFlattening does) merges every packed row's
documents into one. python/tests/test_stack_hf_transformers.py runs ``check``
on it and expects the failure, shrunk to two rows.
"""
import numpy as np

from attn_oracle.stacks import hf_transformers


class MergesRowsForManyRows(hf_transformers.PositionIdsMetadata):
    name = "planted-hf-transformers-merged-rows"

    def cu_seqlens(self, position_ids):
        b, t = position_ids.shape
        if b == 1 or hf_transformers.fa_utils._is_packed_sequence(position_ids, b):
            return super().cu_seqlens(position_ids)
        cu = hf_transformers.torch.from_numpy(np.arange(b + 1, dtype=np.int32) * t)  # one sequence per row
        return cu, cu, t, t
