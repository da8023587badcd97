"""Planted twin of attn_oracle.stacks.jax_cudnn (on the CPU stand-in of
jax_cudnn_standin.py where no GPU is), a realistic mapping mistake that `check`
must catch and shrink:

- PackedWindowInclusive: the window handed to cuDNN as W = left, as if cuDNN's
  ``sliding_window_length`` bound were inclusive like ``local_window_size``'s
  (jax.nn adds the 1 itself; a caller of the packed path must).
"""
from jax_cudnn_standin import Packed


class PackedWindowInclusive(Packed):
    name = "jax-cudnn-packed-window-inclusive"
    exclusive_left = False
