"""What the torch stack modules share: dtypes, the device, tensors in and out, packed tokens back in rows.

Imported after the caller's :func:`attn_oracle.stacks.require` of torch, so that a
missing torch is that one-line message, not an ImportError here.
"""

from __future__ import annotations

import numpy as np
import torch

from ..domain import DTYPES, framework_dtypes

TORCH_DTYPES = framework_dtypes(torch, DTYPES)  # fp32, fp16, bf16 -> torch's


def has_cuda() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA setup is "no CUDA" here
        return False


def leaf(a: np.ndarray, device, dtype, grad: bool):
    """``a`` as a tensor on the device in ``dtype``, requiring its gradient when ``grad``."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(device, dtype).requires_grad_(grad)


def heads_first(a: np.ndarray, device, dtype, grad: bool):
    """[R, T, H, D] -> a [R, H, T, D] leaf (the layout SDPA and flex take)."""
    return leaf(a.transpose(0, 2, 1, 3), device, dtype, grad)


def to_numpy(t) -> np.ndarray:
    """A tensor as float64 NumPy on the CPU (what the worker sends)."""
    return t.detach().to("cpu", torch.float64).numpy()


def tokens_to_rows(values, tokens: np.ndarray, shape: tuple) -> np.ndarray:
    """A varlen call's packed rows (``values[i]`` is flat token ``tokens[i]``) back in ``shape``
    ``[R, T, ...]``, 0 elsewhere; ``values`` None (a side with no token: no gradient) is all 0."""
    full = np.zeros((shape[0] * shape[1],) + tuple(shape[2:]))
    if values is not None:
        full[tokens] = to_numpy(values)
    return full.reshape(shape)


def lse_to_rows(lse: np.ndarray, tokens: np.ndarray, rows: int, t: int) -> np.ndarray:
    """A varlen call's lse ``[H, total_q]`` as ours ``[R, H, T]``: -inf for a token the call did not
    take, and for FlashAttention's +inf (a query that attends nothing; docs/conventions.md)."""
    heads = lse.shape[0]
    out = np.full((heads, rows * t), -np.inf)
    out[:, tokens] = np.where(lse == np.inf, -np.inf, lse)
    return out.reshape(heads, rows, t).transpose(1, 0, 2)
