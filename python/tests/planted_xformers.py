"""A planted twin of attn_oracle.stacks.xformers_attention, on the CPU stand-in
(python/tests/standin_xformers.py): a realistic mapping mistake.

``WindowSizeIsLeft``: passes our window's left side as xformers' window size,
forgetting that xformers' W counts the query's own key (W = left + 1): every
causal window is one key short. python/tests/test_stack_xformers.py expects it
caught and shrunk small.
"""
import standin_xformers


class WindowSizeIsLeft(standin_xformers.Flash):
    name = "planted-xformers-window-size-is-left"

    def bias(self, layout):
        left = layout["left"]
        return super().bias({**layout, "left": left - 1 if left is not None and left > 1 else left})
