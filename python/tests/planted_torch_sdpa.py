"""Planted twins of attn_oracle.stacks.torch_sdpa, each a realistic mapping mistake, on the
backends that run on a CPU:

- ``MaskedMeansTrue``: hands SDPA the mask in Megatron's convention (True = masked)
  where SDPA's boolean attn_mask says True = attends;
- ``JaggedWithoutDocuments``: packs every row into one sequence, as if the batch
  held one document a row (the nested tensor's offsets from the rows, not the
  documents).

python/tests/test_stack_torch_sdpa.py expects each caught and shrunk small.
"""
import numpy as np

from attn_oracle.stacks import torch_sdpa


class MaskedMeansTrue(torch_sdpa.MathPadded):
    name = "planted-torch-sdpa-masked-means-true"

    def attn_mask(self, keep, attends):
        return ~keep & attends


class JaggedWithoutDocuments(torch_sdpa.MathJagged):
    name = "planted-torch-sdpa-jagged-without-documents"

    def layout(self, batch):
        out = super().layout(batch)
        rows = np.asarray(batch.q_segment_ids).reshape(-1, np.shape(batch.q_segment_ids)[-1]).shape[0]
        per_row = lambda tokens, t: np.bincount(tokens // t, minlength=rows)  # noqa: E731
        tq, tkv = np.shape(batch.q_segment_ids)[-1], np.shape(batch.kv_segment_ids)[-1]
        return {**out, "q_len": per_row(out["q_tokens"], tq), "kv_len": per_row(out["kv_tokens"], tkv)}
