"""Planted twins of attn_oracle.stacks.torch_varlen, each a realistic mapping mistake, on the
CPU stand-in kernel (python/tests/standin_torch_varlen.py):

- ``LseAsDocumented``: reads lse in the docstring's layout, (T_q, H), where the
  kernel gives (H, T_q): right with one head, scrambled with two;
- ``CausalFlagForgotten``: passes the adapter's window as it is, forgetting that
  varlen_attn has no causal flag and only ``window_size=(L, 0)`` makes it causal.

python/tests/test_stack_torch_varlen.py expects each caught and shrunk small.
"""
import standin_torch_varlen

from attn_oracle.stacks import torch_varlen


class LseAsDocumented(standin_torch_varlen.Backend):
    name = "planted-torch-varlen-lse-as-documented"

    def lse_layout(self, lse, heads, total_q):
        return lse.reshape(total_q, heads).T


class CausalFlagForgotten(standin_torch_varlen.Backend):
    name = "planted-torch-varlen-causal-flag-forgotten"

    def varlen_attn(self, *args, window_size, **kwargs):
        left, right = window_size
        return super().varlen_attn(*args, window_size=(left, -1) if right == 0 else window_size, **kwargs)
