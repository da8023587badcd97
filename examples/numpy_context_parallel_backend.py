"""A NumPy backend that serves context parallelism itself (docs/semantics.md#91-context-parallelism).

Served with ``python3 -m attn_oracle.worker examples.numpy_context_parallel_backend:Backend``.
It builds its own permutation for every balance, writes each rank's kernel call as
the rank problem of model/context_parallel.hpp and computes that call's metadata and
attention with numpy_backend.py's code (the token-level mask, so
``token_level_mask = True``):

- q: the rank's local tokens in local order (all_to_all: the whole row, and the
  rank's heads only);
- kv: every token in row order (all_gather, all_to_all), or at ring step s the
  local tokens of rank (r - s) mod cp;
- the mask: the problem's, bottom-right kinds written top-left (right window
  unbounded): on self-attention each document has as many queries as keys, where
  the two are one mask, and only the top-left one survives keeping some of a
  document's tokens.

A ring's forward merges its cp partial results by lse; every strategy's backward is
the all-gather one (each rank's queries against every key, dK/dV summed over the
ranks). Outputs go back rank-major, slot j of rank r holding row token
``permutation[b, r*L + j]``.

It promises exact balance where the layout gives it (``cp_balance_bound``), and
has no ``validate_cp_layout``: the suite validates for it (attn_oracle's
validate_cp), so every call here gets a layout the problem can run. ctest and
python/tests/test_context_parallel_worker.py replay context_parallel cases on it;
planted_numpy_context_parallel_backend.py breaks its ring.
"""
import dataclasses

import numpy as np

from attn_oracle.errors import Unsupported
from attn_oracle.worker import Batch, Inputs, Problem

from . import numpy_backend


def spans(ids):
    """head_tail's spans of one row, (start, end): each document with the padding after it, a row's leading padding alone."""
    out, i = [], 0
    while i < len(ids):
        j = i + 1
        while j < len(ids) and (ids[j] == 0 or ids[j] == ids[i]) and (ids[i] != 0 or ids[j] == 0):
            j += 1
        out.append((i, j))
        i = j
    return out


def head_tail_chunks(start, end, cp):
    """Per rank, its chunks r and 2*cp-1-r of [start, end) cut in 2*cp."""
    chunks = np.arange(start, end).reshape(2 * cp, -1)
    return [np.concatenate([chunks[r], chunks[2 * cp - 1 - r]]) for r in range(cp)]


def merge_by_lse(o, lse, o_part, lse_part):
    """Two partial results of the same queries over other keys merged as a ring does (o [B, L, H, D], lse [B, H, L])."""
    total = np.logaddexp(lse, lse_part)
    with np.errstate(invalid="ignore"):  # -inf - -inf where neither part attends: weight 0
        weights = [np.where(np.isfinite(total), np.exp(x - total), 0.0) for x in (lse, lse_part)]
    keep, take = (w.transpose(0, 2, 1)[..., None] for w in weights)
    return keep * o + take * o_part, total


class Backend(numpy_backend.Backend):
    name, version = "numpy-context-parallel-example", "1"

    def source_rank(self, layout, rank, step):  # the rank whose keys `rank` meets at `step`
        return layout.source_rank(rank, step)

    def rank_tokens(self, layout, ids):
        """[cp, L]: the row tokens each rank holds, in local (row) order, for one row of ids."""
        t, cp = len(ids), layout.cp
        if layout.balance == "contiguous":
            return np.arange(t).reshape(cp, t // cp)
        if layout.balance == "striped":
            stripes = np.arange(t).reshape(t // layout.stripe, layout.stripe)
            return np.stack([stripes[r::cp].reshape(-1) for r in range(cp)])
        if layout.balance in ("dual_chunk_swap", "head_tail"):
            per_span = [head_tail_chunks(start, end, cp)
                        for start, end in ([(0, t)] if layout.balance == "dual_chunk_swap" else spans(ids))]
            return np.stack([np.concatenate([chunks[r] for chunks in per_span]) for r in range(cp)])
        raise Unsupported(f"balance {layout.balance!r}")

    def cp_permutation(self, layout, problem):
        ids = problem.batch.q_segment_ids
        if layout.balance == "explicit_indices":
            return np.asarray(layout.indices, dtype=np.int64)
        return np.stack([self.rank_tokens(layout, row).reshape(-1) for row in ids]).astype(np.int64)

    def rank_problem(self, layout, problem, perm, rank, step):
        """model/context_parallel.hpp's CpRankProblem: the rank's Problem, q_tokens [B, Lq], kv_tokens [B, Lkv], first q and kv heads."""
        if not (0 <= rank < layout.cp and 0 <= step < layout.steps):
            raise Unsupported(f"rank {rank}, step {step} of a layout of {layout.cp} ranks and {layout.steps} steps")
        b = problem.batch
        rows, t = b.q_segment_ids.shape
        local = t // layout.cp
        every = np.broadcast_to(np.arange(t), (rows, t))
        heads_split = layout.strategy == "all_to_all"
        q_tokens = every if heads_split else perm[:, rank * local:(rank + 1) * local]
        source = self.source_rank(layout, rank, step)
        kv_tokens = perm[:, source * local:(source + 1) * local] if layout.strategy == "ring" else every
        ids, pos = b.q_segment_ids, np.broadcast_to(b.q_segment_pos, b.q_segment_ids.shape)
        at = lambda a, tokens: np.take_along_axis(a, tokens, axis=1)  # noqa: E731
        bottom_right = b.mask.endswith("bottom_right")
        batch = Batch(at(ids, q_tokens), at(pos, q_tokens), at(ids, kv_tokens), at(pos, kv_tokens),
                      b.mask.replace("_bottom_right", ""), (b.window[0], -1 if bottom_right else b.window[1]),
                      b.max_segments)
        split = layout.cp if heads_split else 1
        hq, hkv = problem.heads_q // split, problem.heads_kv // split
        rank_problem = Problem(batch, hq, hkv, problem.head_dim, problem.scale, problem.dtype, problem.backward)
        q_head0, kv_head0 = (rank * hq, rank * hkv) if heads_split else (0, 0)
        return rank_problem, q_tokens, kv_tokens, q_head0, kv_head0

    def rank_inputs(self, call, inputs):
        """The unsharded [B, T, H, D] tensors cut to a rank call's tokens and heads."""
        p, q_tokens, kv_tokens, q0, kv0 = call
        def cut(x, tokens, h0, h):
            return None if x is None else np.take_along_axis(x, tokens[..., None, None], axis=1)[:, :, h0:h0 + h]
        return Inputs(cut(inputs.q, q_tokens, q0, p.heads_q), cut(inputs.k, kv_tokens, kv0, p.heads_kv),
                      cut(inputs.v, kv_tokens, kv0, p.heads_kv), cut(inputs.do, q_tokens, q0, p.heads_q))

    def forward_only(self, call):
        p, *rest = call
        return (Problem(p.batch, p.heads_q, p.heads_kv, p.head_dim, p.scale, p.dtype, False), *rest)

    def cp_balance_bound(self, layout, problem):
        """Exact balance where the layout gives it: all_to_all (heads, not tokens, split); under a causal
        kind without window or padding, head_tail (chunks r and 2*cp-1-r of a document hold as many
        attended pairs as any other such pair) and dual_chunk_swap on rows of one document."""
        b = problem.batch
        if layout.strategy == "all_to_all":
            return 1.0
        if "causal" not in b.mask or tuple(b.window) != (-1, -1) or (b.q_segment_ids == 0).any():
            return None
        one_document = (b.q_segment_ids == b.q_segment_ids[:, :1]).all()
        return 1.0 if layout.balance == "head_tail" or (layout.balance == "dual_chunk_swap" and one_document) else None

    def cp_rank_metadata(self, layout, problem, rank, step):
        call = self.rank_problem(layout, problem, self.cp_permutation(layout, problem), rank, step)
        return self.metadata(call[0].batch)

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        call = self.forward_only(self.rank_problem(layout, problem, self.cp_permutation(layout, problem), rank, step))
        x = self.rank_inputs(call, inputs)
        return self.attention(call[0], Inputs(x.q, x.k, x.v, None))

    def cp_attention(self, layout, problem, inputs):
        perm = self.cp_permutation(layout, problem)
        rows, t = perm.shape
        hq, hkv, d = problem.heads_q, problem.heads_kv, problem.head_dim
        slot_of = np.argsort(perm, axis=1)  # where each row token sits among the rank-major slots
        row = np.arange(rows)[:, None]
        out = {"o": np.zeros((rows, t, hq, d)), "lse": np.full((rows, hq, t), -np.inf)}
        if problem.backward:
            out |= {"dq": np.zeros_like(out["o"]), "dk": np.zeros((rows, t, hkv, d)), "dv": np.zeros((rows, t, hkv, d))}

        def place(call, result, forward, grads):
            p, q_tokens, kv_tokens, q0, kv0 = call
            qs, ks = slot_of[row, q_tokens], slot_of[row, kv_tokens]
            if forward:
                out["o"][row, qs, q0:q0 + p.heads_q] = result["o"]
                lse = out["lse"].transpose(0, 2, 1)  # a view [B, T, H]
                lse[row, qs, q0:q0 + p.heads_q] = result["lse"].transpose(0, 2, 1)
            if grads:  # every key of a call is a distinct token: += adds once per token
                out["dq"][row, qs, q0:q0 + p.heads_q] = result["dq"]
                out["dk"][row, ks, kv0:kv0 + p.heads_kv] += result["dk"]
                out["dv"][row, ks, kv0:kv0 + p.heads_kv] += result["dv"]

        ring = layout.strategy == "ring"
        for rank in range(layout.cp):
            if ring:
                merged = None
                for step in range(layout.cp):
                    part = self.cp_rank_attention(layout, problem, inputs, rank, step)
                    merged = (part["o"], part["lse"]) if merged is None else merge_by_lse(*merged, part["o"], part["lse"])
                place(self.rank_problem(layout, problem, perm, rank, 0), dict(o=merged[0], lse=merged[1]), True, False)
                if not problem.backward:
                    continue
            # The backward of every strategy, and the forward of the others: the rank's
            # queries against every key in row order.
            gathered = dataclasses.replace(layout, strategy="all_gather") if ring else layout
            call = self.rank_problem(gathered, problem, perm, rank, 0)
            result = self.attention(call[0], self.rank_inputs(call, inputs))
            place(call, result, not ring, problem.backward)
        return out
