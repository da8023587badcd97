"""A float64 NumPy reference of context parallelism for test_multidevice_cp.py, written from
the contract (model/include/attn_oracle/model/context_parallel.hpp,
docs/semantics.md#2-the-attention-mask, docs/semantics.md#3-metadata, docs/semantics.md#5-attention-outputs-and-gradients) and apart from the runners: the permutation token by token (each token's
rank, then row order, as reference/src/context_parallel.cpp derives it), the mask with the
bottom-right rule as docs/semantics.md#2-the-attention-mask states it (run lengths, not rewritten top-left), attention and
its gradients in closed form, metadata by loops. Also the random problems the tests draw."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

KINDS = ("no_mask", "padding", "causal", "padding_causal", "causal_bottom_right", "padding_causal_bottom_right")


# ------------------------------------------------------------------ layouts
def _head_tail_rank(i, n, cp):
    chunk = i // (n // (2 * cp))
    return chunk if chunk < cp else 2 * cp - 1 - chunk


def _span_start(ids, t):  # padding belongs to the document before it; a row's leading padding is a span
    return t == 0 or (ids[t] != 0 and ids[t] != ids[t - 1])


def token_rank(layout, ids, t):
    """The rank holding token t of a row."""
    cp, n = layout.cp, len(ids)
    if layout.balance == "contiguous":
        return t // (n // cp)
    if layout.balance == "dual_chunk_swap":
        return _head_tail_rank(t, n, cp)
    if layout.balance == "striped":
        return (t // layout.stripe) % cp
    a, b = t, t + 1  # head_tail
    while not _span_start(ids, a):
        a -= 1
    while b < n and not _span_start(ids, b):
        b += 1
    return _head_tail_rank(t - a, b - a, cp)


def permutation(layout, ids):
    """[B, T]: each row's tokens sorted by (rank, row order); explicit indices as given."""
    if layout.balance == "explicit_indices":
        return np.asarray(layout.indices, np.int64)
    return np.stack([np.array(sorted(range(len(row)), key=lambda t: (token_rank(layout, row, t), t)))
                     for row in ids]).astype(np.int64)


def rank_tokens(layout, perm, rank, step):
    """(q_tokens [B, Lq], kv_tokens [B, Lkv], q heads slice, kv heads slice as fractions) of a rank problem."""
    cp, (rows, t) = layout.cp, perm.shape
    local = t // cp
    own = lambda r: perm[:, r * local:(r + 1) * local]  # noqa: E731
    whole = np.broadcast_to(np.arange(t), (rows, t))
    if layout.strategy == "all_to_all":
        return whole, whole
    if layout.strategy == "ring":
        return own(rank), own((rank - step) % cp)
    return own(rank), whole


# ------------------------------------------------------------------ mask and attention
def _run_lengths(ids):
    out = np.zeros(len(ids), np.int64)
    for d in set(ids.tolist()) - {0}:
        out[ids == d] = (ids == d).sum()
    return out


def row_mask(ids, pos, kind, window, with_window=True):
    """[T, T] of one self-attention row, by docs/semantics.md#2-the-attention-mask's table (bottom-right with run lengths)."""
    ids, pos = np.asarray(ids, np.int64), np.asarray(pos, np.int64)
    return _row_mask(ids.tobytes(), pos.tobytes(), kind, tuple(window), with_window)


@functools.lru_cache(maxsize=256)  # each rank and step asks for the same rows
def _row_mask(ids, pos, kind, window, with_window):
    ids, pos = np.frombuffer(ids, np.int64), np.frombuffer(pos, np.int64)
    left, right = window
    rl = _run_lengths(ids)
    t = len(ids)
    m = np.zeros((t, t), bool)
    for i in range(t):
        for j in range(t):
            if ids[i] == 0 or ids[i] != ids[j]:
                continue
            p, s = int(pos[i]), int(pos[j])
            ok = True
            if kind.endswith("bottom_right"):
                ok = rl[i] - p <= rl[j] - s
                if with_window and left >= 0:
                    ok &= (rl[i] - p) + left >= rl[j] - s
            else:
                if "causal" in kind:
                    ok = p >= s
                if with_window:
                    ok &= (left < 0 or p - left <= s) and (right < 0 or s <= p + right)
            m[i, j] = ok
    return m


def attention(q, k, v, do, mask, scale):
    """float64 o [L, H, D], lse [H, L] and (dq, dk, dv) of one row under mask [Lq, Lk]."""
    group = q.shape[1] // k.shape[1]
    kq, vq = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = scale * np.einsum("qhd,khd->hqk", q, kq)
    s = np.where(mask[None], s, -np.inf)
    top = s.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    p = np.exp(s - top)
    total = p.sum(-1, keepdims=True)
    p = np.where(total > 0, p / np.where(total > 0, total, 1), 0.0)
    lse = np.where(total[..., 0] > 0, top[..., 0] + np.log(np.where(total[..., 0] > 0, total[..., 0], 1)), -np.inf)
    o = np.einsum("hqk,khd->qhd", p, vq)
    if do is None:
        return o, lse, None
    dv = np.einsum("hqk,qhd->khd", p, do)
    dp = np.einsum("qhd,khd->hqk", do, vq)
    ds = p * (dp - np.einsum("qhd,qhd->hq", do, o)[..., None])
    dq = scale * np.einsum("hqk,khd->qhd", ds, kq)
    dk = scale * np.einsum("hqk,qhd->khd", ds, q)
    fold = lambda g: g.reshape(g.shape[0], -1, group, g.shape[2]).sum(2)  # noqa: E731  GQA: sum over the group
    return o, lse, (dq, fold(dk), fold(dv))


def full_attention(problem, inputs):
    """The unsharded answer, row order: what every CP run must equal."""
    b = problem.batch
    outs = [attention(inputs.q[r], inputs.k[r], inputs.v[r], None if inputs.do is None else inputs.do[r],
                      row_mask(b.q_segment_ids[r], b.q_segment_pos[r], b.mask, b.window), scale(problem))
            for r in range(len(b.q_segment_ids))]
    result = {"o": np.stack([o for o, _, _ in outs]), "lse": np.stack([l for _, l, _ in outs])}
    if inputs.do is not None:
        for i, name in enumerate(("dq", "dk", "dv")):
            result[name] = np.stack([g[i] for _, _, g in outs])
    return result


def rank_attention(layout, problem, inputs, rank, step):
    """o [B, Lq, h, D], lse [B, h, Lq] of a rank problem: the row mask restricted to its tokens."""
    b = problem.batch
    perm = permutation(layout, b.q_segment_ids)
    qt, kt = rank_tokens(layout, perm, rank, step)
    hq, hkv = problem.heads_q, problem.heads_kv
    if layout.strategy == "all_to_all":
        heads_q = slice(rank * hq // layout.cp, (rank + 1) * hq // layout.cp)
        heads_kv = slice(rank * hkv // layout.cp, (rank + 1) * hkv // layout.cp)
    else:
        heads_q = heads_kv = slice(None)
    os, lses = [], []
    for r in range(len(b.q_segment_ids)):
        m = row_mask(b.q_segment_ids[r], b.q_segment_pos[r], b.mask, b.window)[np.ix_(qt[r], kt[r])]
        o, lse, _ = attention(inputs.q[r][qt[r]][:, heads_q], inputs.k[r][kt[r]][:, heads_kv],
                              inputs.v[r][kt[r]][:, heads_kv], None, m, scale(problem))
        os.append(o)
        lses.append(lse)
    return {"o": np.stack(os), "lse": np.stack(lses)}


def scale(problem):
    return 1.0 / math.sqrt(problem.head_dim) if problem.scale is None else problem.scale


# ------------------------------------------------------------------ metadata
def _side(ids, valid, m):
    rows, length = ids.shape
    seqlens = np.zeros((rows, m), np.int64)
    offsets = np.full((rows, m + 1), -1, np.int64)
    cu, ragged = [0], []
    for r in range(rows):
        k = 0
        for t in range(length):
            if valid[r, t]:
                seqlens[r, ids[r, t] - 1] += 1
        for t in range(length):  # order of appearance: each document's first valid token
            if valid[r, t] and (t == 0 or not valid[r, t - 1] or ids[r, t - 1] != ids[r, t]):
                offsets[r, k] = t
                k += 1
                cu.append(cu[-1] + seqlens[r, ids[r, t] - 1])
                ragged.append(r * length + t)
    return seqlens, offsets, np.array(cu), np.array(ragged + [rows * length])


def rank_metadata(layout, problem, rank, step):
    """docs/semantics.md#3-metadata on a rank problem: valid tokens ignore the window."""
    b = problem.batch
    perm = permutation(layout, b.q_segment_ids)
    qt, kt = rank_tokens(layout, perm, rank, step)
    rows = len(b.q_segment_ids)
    qv, kv = np.zeros(qt.shape, bool), np.zeros(kt.shape, bool)
    for r in range(rows):
        m = row_mask(b.q_segment_ids[r], b.q_segment_pos[r], b.mask, b.window, with_window=False)[np.ix_(qt[r], kt[r])]
        qv[r], kv[r] = m.any(1), m.any(0)
    ids = np.asarray(b.q_segment_ids)
    q_ids, kv_ids = np.take_along_axis(ids, qt, 1), np.take_along_axis(ids, kt, 1)
    sq, oq, cq, rq = _side(q_ids, qv, b.max_segments)
    sk, ok, ck, rk = _side(kv_ids, kv, b.max_segments)
    return {"q_seqlens": sq, "kv_seqlens": sk, "q_offsets": oq, "kv_offsets": ok, "cu_seqlens_q": cq,
            "cu_seqlens_kv": ck, "ragged_offsets_q": rq, "ragged_offsets_kv": rk}


# ------------------------------------------------------------------ drawing problems
def _row(rng, t, cp, padding, head_tail, max_docs):
    """ids and positions of one row. head_tail: spans (a document and its padding) of multiples of 2*cp."""
    ids, pos = np.zeros(t, np.int64), np.zeros(t, np.int64)
    unit = 2 * cp if head_tail else 1
    cuts, at = [], 0
    while at < t:
        n = unit * int(rng.integers(1, max(2, t // unit // 2 + 1)))
        cuts.append(min(n, t - at))
        at += cuts[-1]
    cuts = cuts[:max_docs - 1] + ([sum(cuts[max_docs - 1:])] if len(cuts) >= max_docs else [])
    at, doc = 0, 0
    if padding and head_tail and len(cuts) > 1 and rng.random() < 0.3:  # a row's leading padding
        at += cuts.pop(0)
    for n in cuts:
        doc += int(rng.integers(1, 3))  # ids increase, not always by one
        real = n if not padding else int(rng.integers(1, n + 1))
        ids[at:at + real] = doc
        pos[at:at + real] = int(rng.integers(0, 4)) + np.cumsum(rng.integers(1, 3, real)) - 1
        at += n
    return ids, pos


def problem(rng, cp, kind, *, balance="contiguous", rows=2, tokens=None, heads=None, head_dim=4, window=(-1, -1),
            backward=True, max_segments=8):
    """(problem, inputs): a self-attention batch of `rows` rows that every balance of cp takes."""
    t = tokens or 4 * cp
    padding = kind.startswith("padding")
    sides = [_row(rng, t, cp, padding, balance == "head_tail", max_segments // 2) for _ in range(rows)]
    ids, pos = np.stack([s[0] for s in sides]), np.stack([s[1] for s in sides])
    batch = SimpleNamespace(q_segment_ids=ids, q_segment_pos=pos, kv_segment_ids=ids, kv_segment_pos=pos,
                            mask=kind, window=tuple(window), max_segments=max_segments)
    hq, hkv = heads or (2 * cp, cp)
    p = SimpleNamespace(batch=batch, heads_q=hq, heads_kv=hkv, head_dim=head_dim, scale=None, dtype="fp32",
                        backward=backward)
    f32 = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32).astype(np.float64)  # noqa: E731
    x = SimpleNamespace(q=f32(rows, t, hq, head_dim), k=f32(rows, t, hkv, head_dim), v=f32(rows, t, hkv, head_dim),
                        do=f32(rows, t, hq, head_dim) if backward else None)
    return p, x


def layout(cls, cp, strategy, balance, rng=None, rows=2, tokens=None, scrambled=False):
    """A layout of class cls; explicit indices drawn at random, each rank's tokens in row order unless scrambled."""
    t = tokens or 4 * cp
    if balance != "explicit_indices":
        return cls(cp=cp, strategy=strategy, balance=balance, stripe=2 if balance == "striped" else 1)
    local = t // cp
    idx = []
    for _ in range(rows):
        p = rng.permutation(t).reshape(cp, local)
        idx.append(p.reshape(-1) if scrambled else np.sort(p, axis=1).reshape(-1))
    return cls(cp=cp, strategy=strategy, balance=balance, stripe=1, indices=np.stack(idx).astype(np.int64))
