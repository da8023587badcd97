"""Planted twins of the CP stack modules, each with one realistic mistake in its mapping; their
tests (test_stack_*_cp.py) see the contract catch each.

``MegatronBackend``: keeps a segment's keys as DSA's layout gives them, padding included (the
actual cu_seqlens forgotten): wrong wherever a document has padding after it.
``TorchCp``: takes the balancer's restore indices for the permutation (the inverse): wrong for
every balance but the contiguous one.
``RingLlama3``: reads cu_seqlens_k as offsets into the row, forgetting local_k_slice's start:
wrong on every rank whose first document began on an earlier rank.
"""
from attn_oracle.stacks import megatron_cp, ring_flash_attn_cp, torch_cp


class MegatronBackend(megatron_cp.Backend):
    name = "planted-megatron-cp"

    def document_keys(self, kv_real, start, length):
        return int(length)


class TorchCp(torch_cp.Backend):
    name = "planted-torch-cp"

    def cp_permutation(self, layout, problem):
        return torch_cp._indices(layout, problem, restore=True)


class RingLlama3(ring_flash_attn_cp.Llama3):
    name = "planted-ring-flash-attn-llama3"

    def key_starts(self, cu_k, k_slice):
        return cu_k[:-1]
