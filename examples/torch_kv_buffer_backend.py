"""A PyTorch shared K/V buffer backend for attn-oracle (docs/python.md, "The K/V buffer").

Served with ``python3 -m attn_oracle.worker examples.torch_kv_buffer_backend:Backend``
(torch 2.5 or newer, for ``enable_gqa``; the CPU build is enough). The shape
of a training step that streams micro-sequences through one K/V buffer per layer:

- ``kv_micro_sequence``: the micro-sequence preprocessing from document lengths
  (examples/numpy_kv_buffer_metadata_backend.py);
- ``kv_write_slice``: micro-sequence i's keys and values into buffer rows
  [begin, end) of the buffer [N, 2, Hkv, D] (K then V per token);
- ``kv_attend``: SDPA of its queries against the view buffer[first_document_begin,
  end), masked per document from cu_seqlens_q / cu_seqlens_k (bottom-right, so a
  document that began earlier sees its own earlier tokens); the backward by
  autograd, dK/dV added into the same rows of the gradient buffer;
- ``kv_stream``: the steps in a training step's order, forward in order and
  backward in reverse.

SDPA returns no lse, so the lse is the log-sum-exp of the same masked scores.
Inputs arrive in float64 (exactly representable in the problem's dtype) and the
backend computes in float64. planted_torch_kv_buffer_backend.py is its twin
with a real stack's non-canonical cu_seqlens_k. Tested by
python_worker.torch_kv_buffer_* (ctest) and python/tests/test_kv_buffer_examples.py.
"""
from dataclasses import replace

import numpy as np
import torch
from torch.nn.functional import scaled_dot_product_attention

from attn_oracle.errors import AttnOracleError
from examples.numpy_kv_buffer_metadata_backend import micro_sequence

# The drawn problems are tiny (at most a few dozen tokens): torch's intra-op
# threads cost more than they save. 100 draws of every kv_buffer property took
# 91 s with the default threads and 9 s with one, on the shared two-core machine.
torch.set_num_threads(1)


def document_mask(cu_q, cu_k, kv_rows):
    """[Lq, kv_rows]: query a of document s sees key b of s when b - cu_k[s] <= a - cu_q[s]
    + (its keys - its queries), bottom-right causal inside each document."""
    mask = torch.zeros(int(cu_q[-1]), kv_rows, dtype=torch.bool)
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]))
        shift = (k1 - k0) - (q1 - q0)
        mask[q0:q1, k0:k1] = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril(shift)
    return mask


def attend_view(problem, q, k, v, mask):
    """SDPA of q [Lq, Hq, D] against k, v [Lk, Hkv, D] under mask [Lq, Lk]; o [Lq, Hq, D], lse [Hq, Lq]."""
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # heads first
    scale = 1.0 / np.sqrt(problem.head_dim) if problem.scale is None else problem.scale
    o = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=problem.heads_q != problem.heads_kv)
    groups = problem.heads_q // problem.heads_kv
    scores = q @ k.repeat_interleave(groups, 0).transpose(1, 2) * scale
    # Added as SDPA adds it, not filled: a NaN key reaches the lse as it reaches o.
    bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return o.transpose(0, 1), torch.logsumexp(scores + bias, -1)


def as_tensor(a, grad=False):
    return torch.from_numpy(np.array(a, dtype=np.float64)).requires_grad_(grad)


class Backend:
    name, version = "torch-kv-buffer-example", torch.__version__

    def kv_micro_sequence(self, problem, i):
        return micro_sequence(problem.doc_lengths, problem.micro_seq_tokens, i)

    def kv_write_slice(self, problem, i, slice, buffer):
        md = self.kv_micro_sequence(problem, i)  # an i past the last one: kv_buffer_slice_out_of_bounds
        rows = md["end"] - md["begin"]
        if slice.shape != (rows, 2, problem.heads_kv, problem.head_dim):
            raise AttnOracleError("bad_tensor_shape", f"slice {list(slice.shape)}, expected "
                                  f"[{rows}, 2, {problem.heads_kv}, {problem.head_dim}]")
        out = as_tensor(buffer)
        out[md["begin"]:md["end"]] = as_tensor(slice)
        return out.numpy()

    def kv_view(self, md):
        """The buffer rows this micro-sequence reads, and the metadata that addresses them."""
        return md["first_document_begin"], md["cu_seqlens_k"]

    def kv_attend(self, problem, i, micro, buffer, grad_buffer):
        md = self.kv_micro_sequence(problem, i)
        start, cu_k = self.kv_view(md)
        end = md["end"]
        view = as_tensor(buffer[start:end], problem.backward)
        q = as_tensor(micro.q, problem.backward)
        o, lse = attend_view(problem, q, view[:, 0], view[:, 1], document_mask(md["cu_seqlens_q"], cu_k, end - start))
        out = {"o": o.detach().numpy(), "lse": lse.detach().numpy()}
        if problem.backward:
            o.backward(as_tensor(micro.do))
            grad = as_tensor(grad_buffer)
            grad[start:end] += view.grad  # accumulates: earlier micro-sequences' dK/dV stay
            out.update(dq=q.grad.numpy(), grad_buffer=grad.numpy())
        return out

    def kv_stream(self, problem, inputs):
        n = int(np.sum(problem.doc_lengths))
        mds = [self.kv_micro_sequence(problem, i) for i in range(-(-n // problem.micro_seq_tokens))]
        buffer = np.zeros((n, 2, problem.heads_kv, problem.head_dim))
        grad = np.zeros_like(buffer)
        o, lse, dq = np.zeros_like(inputs.q), np.zeros((problem.heads_q, n)), np.zeros_like(inputs.q)
        forward = replace(problem, backward=False)
        for md in mds:
            b, e = md["begin"], md["end"]
            buffer = self.kv_write_slice(problem, md["index"], np.stack([inputs.k[b:e], inputs.v[b:e]], 1), buffer)
            step = self.kv_attend(forward, md["index"], replace(inputs, q=inputs.q[b:e], do=None), buffer, None)
            o[b:e], lse[:, b:e] = step["o"], step["lse"]
        if not problem.backward:
            return {"o": o, "lse": lse}
        for md in reversed(mds):  # the backward in reverse, into one gradient buffer
            b, e = md["begin"], md["end"]
            step = self.kv_attend(problem, md["index"], replace(inputs, q=inputs.q[b:e], do=inputs.do[b:e]), buffer, grad)
            dq[b:e], grad = step["dq"], step["grad_buffer"]
        return {"o": o, "lse": lse, "dq": dq, "dk": grad[:, 0], "dv": grad[:, 1]}
