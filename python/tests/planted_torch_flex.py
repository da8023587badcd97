"""Planted twins of attn_oracle.stacks.torch_flex: one realistic mask_mod mistake each.

- ``ForgetsDocuments``: the mask_mod keeps the padding test but forgets the
  document term (``q_ids == kv_ids``), so tokens of two documents at the same
  positions attend each other;
- ``TopLeftForBottomRight``: the causal term is top-left whatever the kind, as
  a mask_mod written for ``is_causal`` would be.

python/tests/test_stack_torch_flex.py runs ``check`` on each and expects the
failure, shrunk small.
"""
from attn_oracle.stacks import torch_flex


class ForgetsDocuments(torch_flex.Backend):
    name = "planted-torch-flex-forgets-documents"

    def document_term(self, t, b, q_idx, kv_idx):
        return (t["q_ids"][b, q_idx] != 0) & (t["kv_ids"][b, kv_idx] != 0)


class TopLeftForBottomRight(torch_flex.Backend):
    name = "planted-torch-flex-top-left"

    def causal_term(self, t, kind, b, q_idx, kv_idx):
        return t["q_pos"][b, q_idx] - t["kv_pos"][b, kv_idx] >= 0
