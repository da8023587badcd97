"""A kernel written in cuDNN SDPA's ragged conventions, put under the suite
through its adapter.

The kernel (``cudnn_ragged_sdpa``) reads only what cuDNN's SDPA node reads:
the THD tensors, ``seq_len_q/kv``, ``ragged_offset_q/kv``, the diagonal
alignment and the band bounds, with cuDNN's meaning: for row ``r`` and column
``c`` of one sequence (``shift = s_kv - s_q`` under BOTTOM_RIGHT, 0 under
TOP_LEFT), the right bound ``R`` keeps ``c <= r + shift + R`` and the left bound
``L`` keeps ``c > r + shift - L``: exclusive, so cuDNN's left bound is our window
left + 1. ``attn_oracle.adapters.cudnn_from_batch`` gives those attributes for
our own ``[R, T, H, D]`` tensors (offsets in tokens here: elements per token 1).
planted_cudnn_convention_backend.py keeps ``c >= r + shift - L`` (the left bound
taken as inclusive) and fails with a shrunk case.

Needs the built package (``pip install .``): ``python -m attn_oracle check
examples.cudnn_convention_backend:Backend --filter attention/``.
"""
from dataclasses import asdict

import numpy as np

from attn_oracle import adapters
from attn_oracle.errors import Unsupported
from .flash_convention_backend import scatter_back, tokens
from .numpy_backend import attend_documents


def cudnn_ragged_sdpa(q, k, v, do, attrs, scale, left_bound_exclusive=True):
    """q, do [Tq, Hq, D]; k, v [Tkv, Hkv, D] with sequences where ``attrs`` says (offsets in tokens)."""
    left, right = attrs["left_bound"], attrs["right_bound"]

    def allowed_of(lq, lk):
        r, c = np.arange(lq)[:, None], np.arange(lk)[None, :]
        diagonal = r + (lk - lq if attrs["diagonal_alignment"] == "bottom_right" else 0)
        allowed = np.ones((lq, lk), bool)
        if right is not None:
            allowed &= c <= diagonal + right
        if left is not None:
            allowed &= c > diagonal - left if left_bound_exclusive else c >= diagonal - left
        return allowed

    runs = [(np.arange(oq, oq + lq), np.arange(ok, ok + lk), allowed_of(lq, lk)) for oq, lq, ok, lk in
            zip(attrs["ragged_offset_q"], attrs["seq_len_q"], attrs["ragged_offset_kv"], attrs["seq_len_kv"])]
    return attend_documents(q, k, v, do, runs, scale)


class Backend:
    name, version = "cudnn-convention-example", "1"
    left_bound_exclusive = True  # cuDNN's reading of the left bound

    def attention(self, p, x):
        if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q.ndim != 4:
            raise Unsupported("heads or tensor shapes this example does not check")
        attrs = adapters.cudnn_from_batch(asdict(p.batch))  # unsupported: declined
        do = tokens(x.do) if p.backward else None
        out, lse, *grads = cudnn_ragged_sdpa(tokens(x.q), tokens(x.k), tokens(x.v), do, attrs, p.effective_scale,
                                             self.left_bound_exclusive)
        every = lambda t: np.arange(len(tokens(t)))  # noqa: E731  cuDNN ran on our own tensors, gaps included
        return scatter_back(p, x, every(x.q), every(x.k), out, lse, grads)
