"""Planted twins of attn_oracle.stacks.torch_sdpa, each a realistic mapping mistake, on the
backends that run on a CPU:

- ``MaskedMeansTrue``: hands SDPA the mask in Megatron's convention (True = masked)
  where SDPA's boolean attn_mask says True = attends;
- ``JaggedWithoutDocuments``: packs every row into one sequence, as if the batch
  held one document a row (the nested tensor's offsets from the rows, not the
  documents);
- ``OneKeyTwiceNextKey``: CudnnJagged's mapping of a sequence with one key (sent
  with it twice) off by one, the second copy read from the next sequence's row.

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


class OneKeyTwiceNextKey(torch_sdpa.MathJagged):
    name = "planted-torch-sdpa-one-key-twice-next-key"

    def key_rows(self, kv_len):
        rows, lengths = torch_sdpa.CudnnJagged.key_rows(self, kv_len)
        starts = np.concatenate([[0], np.cumsum(kv_len)[:-1]])
        second = np.cumsum(lengths) - 1  # the second copy of each one-key sequence
        rows = rows.clone()
        for start, end, n in zip(starts, second, kv_len):
            if n == 1:
                rows[end] = min(int(start) + 1, int(np.sum(kv_len)) - 1)
        return rows, lengths
