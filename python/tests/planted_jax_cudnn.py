"""Planted twin of attn_oracle.stacks.jax_cudnn (on the CPU stand-in of
jax_cudnn_standin.py where no GPU is), a realistic mapping mistake that `check`
must catch and shrink:

- PackedWindowInclusive: the window handed to cuDNN as W = left, as if cuDNN's
  ``sliding_window_length`` bound were inclusive like ``local_window_size``'s
  (jax.nn adds the 1 itself; a caller of the packed path must).

And the module without each of its two workarounds of what cuDNN did on an H100
(the stand-in does the same), for the findings' reproduce lines:

- LengthsWindowAsJaxNnHandsIt: ``local_window_size=(L, 0)`` without
  ``is_causal``, handed over as jax.nn does (W alone: cuDNN bounds the left
  side only, and the query attends every later key);
- PackedGradientsAsWritten: dq, dk, dv as cuDNN leaves them where no query
  attends (NaN or garbage).
"""
from jax_cudnn_standin import Lengths, Packed


class PackedWindowInclusive(Packed):
    name = "jax-cudnn-packed-window-inclusive"
    exclusive_left = False


class LengthsWindowAsJaxNnHandsIt(Lengths):
    name = "jax-cudnn-seq-lengths-window-as-jax-nn-hands-it"
    right_by_causal = False


class PackedGradientsAsWritten(Packed):
    name = "jax-cudnn-packed-gradients-as-written"
    zero_unwritten = False
