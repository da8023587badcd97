"""PyTorch flex attention: ``torch.nn.attention.flex_attention.flex_attention`` under a
document mask built from segment ids with ``create_block_mask``.

``python -m attn_oracle check attn_oracle.stacks.torch_flex:Backend``

What runs is flex's own public path: a ``mask_mod`` closed over the batch's
ids, positions and run lengths, turned into a ``BlockMask`` by
``create_block_mask`` (so the block mask is judged through the attention it
gives), then ``flex_attention(q, k, v, block_mask=..., scale=..., enable_gqa=...,
return_aux=AuxRequest(lse=True))``. The ``mask_mod`` is the token-level rule of
docs/semantics.md#2-the-attention-mask, written on flex's indices:

- document term: ``q_ids[b, q_idx] == kv_ids[b, kv_idx]`` and the id is not 0
  (padding);
- top-left causal: ``q_pos - kv_pos >= 0``; bottom-right causal, per document:
  ``q_pos - kv_pos >= rl_q - rl_kv`` (``rl``: the document's tokens in that
  row, on that side);
- window ``(left, right)``: ``q_pos - kv_pos <= left`` and ``kv_pos - q_pos <=
  right`` (top-left and non-causal kinds), ``q_pos - kv_pos - (rl_q - rl_kv) <=
  left`` (bottom-right kinds, whose right side is ignored).

So the backend takes every input the suite draws (cross-attention, padding,
offset positions, extra dims flattened into flex's batch) and says
``token_level_mask = True``. Declined, each shown in
python/tests/test_stack_torch_flex.py: a batch the suite's rules reject (flex
validates nothing, so an invalid batch, ids out of order say, would get an
answer: declined with the code the reference gives, never judged); a key side
with no tokens (flex raises IndexError, a max over the empty key axis); a query
side with no tokens (``create_block_mask`` raises IndexError evaluating a
mask_mod that reads the ids on the empty query axis; flex itself, with a
mask_mod that reads no tensor, returns o and no lse); positions of one call
more than 2^62 apart (the mask_mod's own int64 arithmetic could wrap).

Conventions. A query that attends nothing gets ``o = 0`` and ``lse = -inf`` from
flex itself, the suite's convention: nothing is mapped. flex returns lse in
natural log, in fp32 for fp16 / bf16 inputs (judged at fp32 precision). The
computation runs in the problem's dtype (fp32, fp16, bf16).

Backward. In torch 2.15 flex has no backward on CPU (``NotImplementedError:
FlexAttention does not support backward on CPU``): on a machine without a CUDA
device the backend says ``outputs = ("lse",)`` and is given forward problems
only; with one, it runs on the GPU and returns dq, dk, dv by autograd.

Compilation. On CPU ``flex_attention`` runs eagerly (its unfused implementation,
which materialises the scores); ``Compiled`` runs it under ``torch.compile``,
which compiles one kernel per shape (run it with ``--shape-stable``); on CPU the
compiled kernel gives no lse (torch 2.15), so there it is judged on o alone.
bench/results/stacks-cpu-runs.md has the measured draws per second of both.

Pointing it at a checkout of PyTorch: build and install it into the venv
(``pip install -e`` of the checkout), then run the same command; the version
gate names the release it finds.
"""

from __future__ import annotations

import numpy as np

from attn_oracle import packing
from attn_oracle.domain import is_bottom_right, is_causal
from attn_oracle.errors import Unsupported
from attn_oracle.stacks import decline, require, unvalidated_reason
from attn_oracle import Domain

torch = require("PyTorch flex attention", "torch", "torch", checked=("2.15",))
_flex = require("PyTorch flex attention", "torch.nn.attention.flex_attention", "torch", checked=("2.15",))
from attn_oracle.stacks._torch_common import TORCH_DTYPES as DTYPES, has_cuda, heads_first, to_numpy  # noqa: E402

__all__ = ["Backend", "Compiled", "rows", "run_lengths"]

# Positions of one call more than this far apart could wrap int64 in the window's
# arithmetic (a difference of positions minus a run-length difference); declined.
SPAN = 1 << 62
BOUND = 1 << 62  # a window side at least this wide is unbounded on any accepted call
CUDA_HEAD_DIMS = (16, 32, 64, 128, 256)  # drawn for Compiled on CUDA (at least 16, below)


def rows(batch):
    """(extra shape, [R, Tq] q ids, q positions, [R, Tkv] kv ids, kv positions) over the broadcast rows
    (of a batch already validated: packing.rows' checks are not repeated)."""
    r = packing.rows(batch, validate=False)
    return r.extra, r.q_ids, r.q_pos, r.kv_ids, r.kv_pos


def run_lengths(ids: np.ndarray) -> np.ndarray:
    """[R, T]: the number of tokens of each token's document in its row (0 for padding)."""
    out = np.zeros(ids.shape, np.int64)
    for r in range(ids.shape[0]):
        counts = np.bincount(ids[r], minlength=int(ids[r].max(initial=0)) + 1)
        out[r] = np.where(ids[r] != 0, counts[ids[r]], 0)
    return out


def _validate(batch) -> None:
    """Decline a batch the suite's rules reject (flex would compute something for it)."""
    decline(unvalidated_reason(batch, "flex validates no segment ids"))


class Backend:
    """flex_attention, eager, with a BlockMask from create_block_mask over the batch's segment ids."""

    name = "torch-flex"
    version = torch.__version__
    token_level_mask = True
    device = "cuda" if has_cuda() else "cpu"
    # No flex backward on CPU in torch 2.15: gradients only where a CUDA device runs it.
    outputs = ("lse", "gradients") if device == "cuda" else ("lse",)

    def flex(self):
        return _flex.flex_attention

    def unsupported_attention(self, problem):
        b = problem.batch
        if b.kv_segment_ids.size == 0:
            return "a key side with no tokens: flex_attention raises IndexError (a max over the empty key axis)"
        if b.q_segment_ids.size == 0:
            return ("a query side with no tokens: create_block_mask raises IndexError evaluating a mask_mod that "
                    "reads the batch's ids on the empty query axis")
        if problem.dtype not in DTYPES:
            return f"dtype {problem.dtype}"
        return None

    # ---- the mask_mod: one method per term, so that each can be read (and broken) alone
    def document_term(self, t, b, q_idx, kv_idx):
        return (t["q_ids"][b, q_idx] == t["kv_ids"][b, kv_idx]) & (t["q_ids"][b, q_idx] != 0)

    def causal_term(self, t, kind, b, q_idx, kv_idx):
        d = t["q_pos"][b, q_idx] - t["kv_pos"][b, kv_idx]
        if is_bottom_right(kind):
            return d >= t["q_rl"][b, q_idx] - t["kv_rl"][b, kv_idx]
        return d >= 0

    def window_term(self, t, kind, window, b, q_idx, kv_idx):
        left, right = window
        d = t["q_pos"][b, q_idx] - t["kv_pos"][b, kv_idx]
        ok = d == d  # all True, shaped like d
        if is_bottom_right(kind):
            if left >= 0:
                ok = ok & (d - (t["q_rl"][b, q_idx] - t["kv_rl"][b, kv_idx]) <= min(left, BOUND))
            return ok
        if left >= 0:
            ok = ok & (d <= min(left, BOUND))
        if right >= 0:
            ok = ok & (-d <= min(right, BOUND))
        return ok

    def mask_mod(self, t, kind, window):
        causal, windowed = is_causal(kind), tuple(window) != (-1, -1)

        def mask_mod(b, h, q_idx, kv_idx):
            keep = self.document_term(t, b, q_idx, kv_idx)
            if causal:
                keep = keep & self.causal_term(t, kind, b, q_idx, kv_idx)
            if windowed:
                keep = keep & self.window_term(t, kind, window, b, q_idx, kv_idx)
            return keep

        return mask_mod

    def mask_tensors(self, batch) -> dict:
        """What the mask_mod reads, [R, T] int64 tensors on the device: ids, positions, run lengths."""
        _validate(batch)
        extra, qi, qp, ki, kp = rows(batch)
        positions = np.concatenate([qp[qi != 0], kp[ki != 0]])
        if positions.size and int(positions.max()) - int(positions.min()) >= SPAN:
            raise Unsupported("positions more than 2^62 apart in one call: the mask_mod's int64 arithmetic could wrap")
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int64)).to(self.device)  # noqa: E731
        return {"q_ids": as_tensor(qi), "kv_ids": as_tensor(ki), "q_pos": as_tensor(qp), "kv_pos": as_tensor(kp),
                "q_rl": as_tensor(run_lengths(qi)), "kv_rl": as_tensor(run_lengths(ki))}

    def dense_mask(self, batch):
        """[R, Tq, Tkv] bool: the mask_mod evaluated on every (query, key) pair (what SDPA's attn_mask takes)."""
        t = self.mask_tensors(batch)
        r, tq = t["q_ids"].shape
        tkv = t["kv_ids"].shape[1]
        index = lambda n: torch.arange(n, device=self.device)  # noqa: E731
        keep = self.mask_mod(t, batch.mask, batch.window)(index(r)[:, None, None], None, index(tq)[None, :, None],
                                                          index(tkv)[None, None, :])
        return keep.expand(r, tq, tkv)

    def block_mask(self, batch):
        t = self.mask_tensors(batch)
        r, tq = t["q_ids"].shape
        mask_mod = self.mask_mod(t, batch.mask, batch.window)
        return _flex.create_block_mask(mask_mod, r, None, tq, t["kv_ids"].shape[1], device=self.device)

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        block_mask = self.block_mask(problem.batch)
        dtype, grad = DTYPES[problem.dtype], problem.backward and "gradients" in self.outputs
        q, k, v = (heads_first(a, self.device, dtype, grad) for a in (inputs.q, inputs.k, inputs.v))
        kwargs = dict(block_mask=block_mask, scale=problem.effective_scale, enable_gqa=problem.heads_q != problem.heads_kv)
        if "lse" not in self.outputs:
            o = self.flex()(q, k, v, **kwargs)
            out = {"o": to_numpy(o.transpose(1, 2))}
        else:
            if hasattr(_flex, "AuxRequest"):
                o, aux = self.flex()(q, k, v, return_aux=_flex.AuxRequest(lse=True), **kwargs)
                lse = aux.lse
            else:  # releases before return_aux
                o, lse = self.flex()(q, k, v, return_lse=True, **kwargs)
            out = {"o": to_numpy(o.transpose(1, 2)), "lse": to_numpy(lse)}
        if grad:
            o.backward(heads_first(inputs.do, self.device, dtype, grad))
            out.update(dq=to_numpy(q.grad.transpose(1, 2)), dk=to_numpy(k.grad.transpose(1, 2)),
                       dv=to_numpy(v.grad.transpose(1, 2)))
        return out


class Compiled(Backend):
    """The same under ``torch.compile(flex_attention)``: flex's fused kernel, compiled once per shape.

    On CPU torch 2.15's compiled flex is inference only and has no lse
    (``NotImplementedError: torch.compile on CPU only supports inference and
    `return_lse` is not supported yet``): there it produces o alone
    (``outputs = ()``, "lse not compared"); on CUDA, o, lse and the gradients, at head dims
    of 16 and up (below, its CUDA lowering raises NotImplementedError).
    """

    name = "torch-flex-compiled"
    outputs = ("lse", "gradients") if Backend.device == "cuda" else ()
    # flex's CUDA lowering takes head dims of at least 16 (torch/_inductor/kernel/flex/flex_attention.py:
    # "NYI: embedding dimension of the query, key, and value must be at least 16"); its CPU one any.
    domain = Domain(head_dims=CUDA_HEAD_DIMS) if Backend.device == "cuda" else Domain()
    _compiled = None

    def unsupported_attention(self, problem):
        if self.device == "cuda" and problem.head_dim < 16:
            return (f"head_dim {problem.head_dim}: compiled flex on CUDA raises NotImplementedError below 16 "
                    "(its lowering's tl.dot)")
        return super().unsupported_attention(problem)

    def flex(self):
        if Compiled._compiled is None:
            Compiled._compiled = torch.compile(_flex.flex_attention, dynamic=False)
        return Compiled._compiled
