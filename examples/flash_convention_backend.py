"""A kernel written in FlashAttention's conventions, put under the suite through
its adapter.

The kernel (``flash_varlen``) reads only what ``flash_attn_varlen_func`` reads:
packed ``[total, H, D]`` tensors, ``cu_seqlens_q/k``, ``causal`` and
``window_size``, with FlashAttention's meaning: ``causal`` and the window are
anchored at the bottom-right of each document (query ``i`` of ``lq`` sees keys up
to ``i + lk - lq``), a ``-1`` side is unbounded (FA3), and a query that attends
nothing gets ``softmax_lse = +inf``. The backend turns each drawn batch into
those arguments with ``attn_oracle.adapters.flash_attention_from_batch``, gathers
the tokens, runs the kernel and scatters the results back (``lse`` ``+inf`` ->
``-inf``). A batch FlashAttention cannot express is refused by the adapter with
``unsupported`` and declined. planted_flash_convention_backend.py reads
``causal`` top-left, the usual misreading, and fails with a shrunk case.

Needs the built package (``pip install .``): ``python -m attn_oracle check
examples.flash_convention_backend:Backend --filter attention/``.
"""
from dataclasses import asdict

import numpy as np

from attn_oracle import adapters
from attn_oracle.errors import Unsupported
from .numpy_backend import attend_documents


def flash_varlen(q, k, v, do, cu_seqlens_q, cu_seqlens_k, causal, window_size, scale, bottom_right=True):
    """FlashAttention's varlen attention: q, do [total_q, Hq, D]; k, v [total_k, Hkv, D].
    Returns out, softmax_lse [Hq, total_q] and dq, dk, dv."""
    left, right = window_size

    def allowed_of(lq, lk):
        i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
        diagonal = i + (lk - lq if bottom_right else 0)
        allowed = np.ones((lq, lk), bool)
        if causal:
            allowed &= j <= diagonal
        if left >= 0:
            allowed &= j >= diagonal - left
        if right >= 0:
            allowed &= j <= diagonal + right
        return allowed

    runs = [(np.arange(q0, q1), np.arange(k0, k1), allowed_of(q1 - q0, k1 - k0))
            for (q0, q1), (k0, k1) in zip(zip(cu_seqlens_q, cu_seqlens_q[1:]), zip(cu_seqlens_k, cu_seqlens_k[1:]))]
    out, lse, *grads = attend_documents(q, k, v, do, runs, scale)
    return (out, np.where(np.isneginf(lse), np.inf, lse), *grads)  # FlashAttention's lse: +inf when nothing is attended


def scatter_back(p, x, iq, ik, out, lse, grads):
    """Packed results at our flat tokens iq (q) and ik (kv), in our layouts."""
    rows, tq, hq, d = x.q.shape
    o, ours = np.zeros((rows * tq, hq, d)), np.full((rows * tq, hq), -np.inf)
    o[iq], ours[iq] = out, lse.T
    result = {"o": o.reshape(x.q.shape), "lse": ours.reshape(rows, tq, hq).transpose(0, 2, 1)}
    if p.backward:
        for name, packed, like, at in zip(("dq", "dk", "dv"), grads, (x.q, x.k, x.v), (iq, ik, ik)):
            full = np.zeros((like.shape[0] * like.shape[1], *like.shape[2:]))
            full[at] = packed
            result[name] = full.reshape(like.shape)
    return result


def tokens(t):  # [R, T, H, D] -> [R * T, H, D]: the THD view
    return t.reshape(-1, *t.shape[2:])


class Backend:
    name, version = "flash-convention-example", "1"
    bottom_right = True  # FlashAttention's reading of causal=True

    def attention(self, p, x):
        if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q.ndim != 4:
            raise Unsupported("heads or tensor shapes this example does not check")
        call = adapters.flash_attention_from_batch(asdict(p.batch), version="fa3")  # unsupported: declined
        iq, ik = call["q_tokens"], call["kv_tokens"]
        do = tokens(x.do)[iq] if p.backward else None
        out, softmax_lse, *grads = flash_varlen(tokens(x.q)[iq], tokens(x.k)[ik], tokens(x.v)[ik], do, call["cu_seqlens_q"],
                                        call["cu_seqlens_k"], call["causal"], call["window_size"], p.effective_scale,
                                        self.bottom_right)
        lse = np.where(np.isposinf(softmax_lse), -np.inf, softmax_lse)  # theirs +inf, ours -inf
        return scatter_back(p, x, iq, ik, out, lse, grads)
