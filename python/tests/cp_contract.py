"""The CP contract's answers for the CP stack modules' tests, written here from the definitions in
model/include/attn_oracle/model/context_parallel.hpp (sharing no code with the modules): the
permutation token by token (each token's rank, then row order, as the reference derives it),
the rank problem, and its metadata (docs/semantics.md#3-metadata, from the oracle), until the CP
protocol lets `python -m attn_oracle check` judge the modules."""

from types import SimpleNamespace

import numpy as np

from attn_oracle import oracle, worker


def layout(cp, strategy="all_gather", balance="contiguous", stripe=1, indices=None):
    return SimpleNamespace(cp=cp, strategy=strategy, balance=balance, stripe=stripe, indices=indices)


def problem(ids, pos=None, mask="causal", window=(-1, -1), heads=(2, 2), d=4, dtype="fp32", backward=False):
    ids = np.asarray(ids, np.int64)
    if pos is None:  # positions from 0 in each document
        pos = np.zeros_like(ids)
        for b in range(ids.shape[0]):
            for t in range(1, ids.shape[1]):
                pos[b, t] = pos[b, t - 1] + 1 if ids[b, t] == ids[b, t - 1] else 0
    pos = np.asarray(pos, np.int64)
    m = max(1, int(ids.max(initial=0)))
    batch = worker.Batch(ids, pos, ids, pos, mask, tuple(window), m)
    return worker.Problem(batch, heads[0], heads[1], d, None, dtype, backward)


def _spans(row):
    """head_tail's spans: each document with the padding after it; leading padding alone."""
    starts = [t for t in range(len(row)) if row[t] != 0 and (t == 0 or row[t] != row[t - 1])]
    if len(row) and row[0] == 0:
        starts = [0] + starts
    return list(zip(starts, starts[1:] + [len(row)]))


def token_rank(lay, row):
    """Each token's rank under the layout (explicit_indices aside)."""
    t, cp = len(row), lay.cp
    rank = np.empty(t, np.int64)
    for i in range(t):
        if lay.balance == "contiguous":
            rank[i] = i // (t // cp)
        elif lay.balance == "striped":
            rank[i] = (i // lay.stripe) % cp
        else:
            a, b = (0, t) if lay.balance == "dual_chunk_swap" else next(s for s in _spans(row) if s[0] <= i < s[1])
            chunk = (i - a) // ((b - a) // (2 * cp))
            rank[i] = chunk if chunk < cp else 2 * cp - 1 - chunk
    return rank


def permutation(lay, prob):
    ids = np.asarray(prob.batch.q_segment_ids)
    if lay.balance == "explicit_indices":
        return np.asarray(lay.indices, np.int64)
    out = []
    for row in ids:
        rank = token_rank(lay, row)
        out.append([i for r in range(lay.cp) for i in range(len(row)) if rank[i] == r])  # row order within a rank
    return np.asarray(out, np.int64)


def rank_problem_batch(lay, prob, perm, rank, step):
    b = prob.batch
    ids, pos = np.asarray(b.q_segment_ids), np.asarray(b.q_segment_pos)
    n, t = ids.shape
    local = t // lay.cp
    src = (rank - step) % lay.cp if lay.strategy == "ring" else rank
    q_tok = np.tile(np.arange(t), (n, 1)) if lay.strategy == "all_to_all" else perm[:, rank * local:(rank + 1) * local]
    kv_tok = perm[:, src * local:(src + 1) * local] if lay.strategy == "ring" else np.tile(np.arange(t), (n, 1))
    mask, window = b.mask, tuple(b.window)
    if mask.endswith("_bottom_right"):
        mask, window = mask[: -len("_bottom_right")], (window[0], -1)
    g = lambda a, tok: np.take_along_axis(a, tok, 1)  # noqa: E731
    return dict(q_segment_ids=g(ids, q_tok), q_segment_pos=g(pos, q_tok), kv_segment_ids=g(ids, kv_tok),
                kv_segment_pos=g(pos, kv_tok), mask=mask, window=window, max_segments=b.max_segments)


def rank_metadata(lay, prob, rank, step=0):
    """docs/semantics.md#3-metadata on the rank problem, from the oracle."""
    batch = rank_problem_batch(lay, prob, permutation(lay, prob), rank, step)
    return oracle.metadata(batch.pop("q_segment_ids"), batch.pop("q_segment_pos"), **batch).as_dict()


def assert_metadata_equal(got, want, where=""):
    for name, value in want.items():
        assert np.array_equal(np.asarray(got[name]), value), f"{where} {name}: got {np.asarray(got[name]).tolist()}, " \
                                                             f"expected {value.tolist()}"


def random_spans_rows(rng, rows, cp, spans=4, padding=True):
    """Rows whose head_tail spans are multiples of 2*cp: documents (ids 1, 2, ...) with random
    padding after them and sometimes leading padding; rows end in padding to one length. Without
    padding, one row."""
    assert padding or rows == 1
    unit, out = 2 * cp, []
    for _ in range(rows):
        row = [0] * unit * int(rng.integers(0, 2)) if padding else []
        for doc in range(1, spans + 1):
            n = unit * int(rng.integers(1, 4))
            real = int(rng.integers(1, n + 1)) if padding else n
            row += [doc] * real + [0] * (n - real)
        out.append(row)
    t = max(len(r) for r in out)
    return [r + [0] * (t - len(r)) for r in out]


def random_documents_row(rng, t, documents):
    """One row of t tokens in `documents` runs (ids 1, 2, ...), no padding."""
    cuts = sorted(rng.choice(np.arange(1, t), size=documents - 1, replace=False).tolist()) if documents > 1 else []
    bounds = [0, *cuts, t]
    return [[d + 1 for d in range(documents) for _ in range(bounds[d + 1] - bounds[d])]]


def random_explicit_indices(rng, rows, t, cp):
    """A valid explicit_indices permutation: each token to a random rank (L each), a rank's tokens in
    row order (the contract's precondition)."""
    local, out = t // cp, []
    for _ in range(rows):
        ranks = rng.permutation(np.repeat(np.arange(cp), local))
        out.append(np.concatenate([np.flatnonzero(ranks == r) for r in range(cp)]))
    return np.stack(out)
