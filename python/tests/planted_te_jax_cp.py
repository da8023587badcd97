"""A planted twin of attn_oracle.stacks.te_jax_cp: one convention misapplied, for its test to catch."""
from attn_oracle.stacks import te_jax_cp


class StripedKvOffsetsLocal(te_jax_cp.Striped):
    """Planted: the all-gather's kv offsets read into the rank's local buffer (row * L), where TE
    writes them into the gathered row (row * T)."""

    name = "planted-te-jax-cp-kv-offsets-local"

    def kernel_calls(self, layout, problem):
        return {key: dict(call, kv_tokens=call["q_tokens"]) for key, call in super().kernel_calls(layout, problem).items()}
