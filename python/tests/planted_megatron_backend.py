"""Planted twins of attn_oracle.stacks.megatron, each with one realistic mistake in its mapping.

``Backend``: builds PackedSeqParams from the collated per-sample ``cu_seqlens``
by stripping row 0's padding, without ``flatten_batch_for_packed_sequences``:
right with one sample per micro-batch, wrong as soon as there are two (the
second sample's documents are lost). The suite shrinks it to two rows.

``EodMaskBackend``: builds the masks without ``reset_attention_mask`` (Megatron's
default), so every document attends the earlier documents of its sample; the
positions still restart (``reset_position_ids``). Shrunk to two one-token documents.
"""
import numpy as np
from torch.utils.data import default_collate

from attn_oracle.stacks import megatron


class Backend(megatron.Backend):
    name = "planted-megatron-packed-seq-params"

    def params(self, ids):
        dataset = megatron._Samples(ids, inter_document_masking=True)
        batch = default_collate([dataset[i] for i in range(len(dataset))])
        row = batch["cu_seqlens"][0]
        cu = row[:int(np.argmax(row.numpy() == ids.shape[-1])) + 1]  # row 0's prefix sums up to seq_length
        longest = int(batch["max_seqlen"].max())
        return megatron.PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                                        max_seqlen_kv=longest)


class EodMaskBackend(megatron.EodMaskBackend):
    name = "planted-megatron-eod-mask-sdpa"

    def masks(self, ids):
        dataset = megatron._Samples(ids, reset_attention_mask=False, reset_position_ids=True,
                                    create_attention_mask=True)
        samples = default_collate([dataset[i] for i in range(len(dataset))])
        return samples["attention_mask"], samples["position_ids"]
