"""A planted twin of attn_oracle.stacks.fast_llm: one realistic mistake in its mapping.

It reports ``first_document_begin`` as the micro-sequence's ``begin`` (where
Fast-LLM's cropping starts, ``sequence_k_past``) instead of the start of the
document holding that token: right whenever a micro-sequence starts a
document, wrong as soon as a document runs over a micro-sequence boundary.
The suite shrinks it to one two-token document in one-token micro-sequences.
"""
from attn_oracle.stacks import fast_llm


class Backend(fast_llm.Backend):
    name = "planted-fast-llm-micro-sequences"

    def kv_micro_sequence(self, problem, i):
        out = super().kv_micro_sequence(problem, i)
        return {**out, "first_document_begin": out["begin"]}
