"""A PyTorch backend for attn-oracle: attention through
torch.nn.functional.scaled_dot_product_attention, its backward by autograd.

Served with ``python3 -m attn_oracle.worker examples.torch_backend:Backend``
(needs ``torch`` 2.5 or newer, for ``enable_gqa``; the CPU build is enough).
This is the shape a PyTorch backend takes: NumPy in, ``torch.from_numpy`` at
the edge and the [R, H, T, D] layout SDPA wants, a boolean mask, autograd for
the gradients, ``.numpy()`` out. The batch checks and the mask are the NumPy
example's (examples/numpy_backend.py), so what is judged here is the torch
side: layout, GQA, scale and the gradients. SDPA returns no lse, so the backend
says ``outputs = ("gradients",)`` and every summary line says "lse not
compared". ctest runs `check` on it when torch imports
(python_worker.torch_backend_passes), and skips with a message otherwise.
"""
import numpy as np
import torch
from torch.nn.functional import scaled_dot_product_attention

from .numpy_backend import Backend as NumpyBackend


def heads_first(a, grad=False):  # NumPy [R, T, H, D] -> float64 tensor [R, H, T, D]
    return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 2, 1, 3), np.float64)).requires_grad_(grad)


def tokens_first(t):  # tensor [R, H, T, D] -> NumPy [R, T, H, D]
    return t.detach().transpose(1, 2).numpy()


class Backend:
    name, version, token_level_mask = "torch-example", torch.__version__, True
    outputs = ("gradients",)  # no lse: SDPA does not return it
    masks = NumpyBackend()

    def attention(self, p, x):
        rows = self.masks.checked_attention_rows(p, x)
        mask = torch.from_numpy(np.stack([self.masks.row_mask(p.batch, *row) for row in zip(*rows)]))[:, None]
        attends = mask.any(-1, keepdim=True)  # [R, 1, Tq, 1]
        # A query that attends nothing would take a softmax over nothing (NaN, and NaN
        # gradients): it attends every key instead and its output is zeroed, which also
        # zeroes what flows back through it.
        q, k, v = (heads_first(t, p.backward) for t in (x.q, x.k, x.v))
        o = attends * scaled_dot_product_attention(q, k, v, attn_mask=mask | ~attends, scale=p.effective_scale,
                                                   enable_gqa=p.heads_q != p.heads_kv)
        out = {"o": tokens_first(o)}
        if p.backward:
            o.backward(heads_first(x.do))
            out.update(dq=tokens_first(q.grad), dk=tokens_first(k.grad), dv=tokens_first(v.grad))
        return out
