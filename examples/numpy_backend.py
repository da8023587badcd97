"""A NumPy backend for attn-oracle: metadata and attention forward + backward.

Served with ``python3 -m attn_oracle.worker examples.numpy_backend:Backend``
(docs/protocol.md). Metadata is read off each row's token-level mask
(docs/semantics.md#2-the-attention-mask and docs/semantics.md#3-metadata); attention runs per document in float64 under that mask, so the
backend says ``token_level_mask = True`` and is judged on every input. It does
not validate: an invalid batch is declined, never judged. ctest runs `check` on
it (python_worker.numpy_backend_passes); planted_numpy_backend.py breaks it.
"""
import numpy as np

from attn_oracle.errors import Unsupported

I64 = np.iinfo(np.int64)


def at_most(d, bound):  # d <= bound for an int64 array and any Python int, without wrapping
    return d <= min(max(bound, I64.min), I64.max)


def previous(a):  # a[:, t - 1], 0 before the first token
    out = np.zeros_like(a)
    out[:, 1:] = a[:, :-1]
    return out


class Backend:
    name, version, token_level_mask = "numpy-example", "1", True

    def causal(self, kind, d, shift):  # d = pos_q - pos_kv per pair, shift = L_q - L_kv of its document
        if kind.endswith("bottom_right"):  # the diagonal anchored at each document's bottom-right
            return d >= shift
        return d >= 0 if "causal" in kind else np.ones(d.shape, bool)

    def rows(self, b):  # [R, T] ids and positions of each side over the broadcast rows
        ids, pos = (b.q_segment_ids, b.kv_segment_ids), (b.q_segment_pos, b.kv_segment_pos)
        try:
            assert all(i.ndim >= 2 and 2 <= p.ndim <= i.ndim and p.shape == i.shape[i.ndim - p.ndim:] for i, p in zip(ids, pos))
            assert ids[0].shape[-2] == ids[1].shape[-2] and b.max_segments >= 1
            extra = np.broadcast_shapes(ids[0].shape[:-2], ids[1].shape[:-2])
            flat = [a if a.shape == extra + i.shape[-2:] else np.broadcast_to(a, extra + i.shape[-2:])
                    for i, p in zip(ids, pos) for a in (i, p)]
            flat = [a.reshape(-1, a.shape[-1]) for a in flat]
            for i, p in zip(flat[::2], flat[1::2]):
                before, nonzero = previous(i), i != 0
                start, same = nonzero & (i != before), nonzero & (i == before)
                assert (i >= 0).all() and (i <= b.max_segments).all() and (p >= 0).all()
                assert (i[start] > np.maximum.accumulate(before, axis=1)[start]).all()
                assert (p[same] > previous(p)[same]).all() and ("padding" in b.mask or nonzero.all())
        except (AssertionError, ValueError):
            raise Unsupported("not a valid batch (this example does not validate)")
        return extra, ids[0].shape[-2], flat

    def attends(self, kind, qi, qp, ki, kp):  # docs/semantics.md#2-the-attention-mask without the window, one row
        n = max(qi.max(initial=0), ki.max(initial=0)) + 1
        shift = np.bincount(qi, minlength=n)[qi][:, None] - np.bincount(ki, minlength=n)[ki][None, :]
        same = (qi[:, None] == ki[None, :]) & (qi[:, None] != 0)
        return same & self.causal(kind, qp[:, None] - kp[None, :], shift)

    def documents(self, qi, ki):  # (query indices, key indices) of each document one row's two sides share
        for doc in np.intersect1d(qi[qi != 0], ki):
            yield np.flatnonzero(qi == doc), np.flatnonzero(ki == doc)

    def document_mask(self, batch, d, shift):  # one document's [q, kv] block: mask kind and window
        mask = self.causal(batch.mask, d, shift)
        (left, right), br = batch.window, batch.mask.endswith("bottom_right")
        if left >= 0:
            mask &= at_most(d, left + (shift if br else 0))
        if right >= 0 and not br:
            mask &= at_most(-d, right)
        return mask

    def row_mask(self, batch, qi, qp, ki, kp):  # [Tq, Tkv] bool: who attends whom in one row
        mask = np.zeros((len(qi), len(ki)), bool)
        for iq, ik in self.documents(qi, ki):
            mask[np.ix_(iq, ik)] = self.document_mask(batch, qp[iq][:, None] - kp[ik][None, :], len(iq) - len(ik))
        return mask

    def checked_attention_rows(self, p, x):  # the rows' ids and positions, or decline what this example does not check
        rows = self.rows(p.batch)[2]
        if p.heads_kv < 1 or p.heads_q % p.heads_kv or x.q.ndim != 4 or not all(np.isfinite(t).all() for t in (x.q, x.k, x.v)):
            raise Unsupported("heads, tensor shapes or values this example does not check")
        return rows

    def metadata(self, b):
        extra, batch, (qi, qp, ki, kp) = self.rows(b)
        rows, m = len(qi), b.max_segments
        out = {f"{s}_{f}": np.full((rows, m + (f == "offsets")), -(f == "offsets"), np.int64)
               for s in ("q", "kv") for f in ("seqlens", "offsets")}
        cu, ragged = {"q": [0], "kv": [0]}, {"q": [], "kv": []}
        for r in range(rows):
            a = self.attends(b.mask, qi[r], qp[r], ki[r], kp[r])
            for side, ids, valid in (("q", qi[r], a.any(1)), ("kv", ki[r], a.any(0))):
                run = np.where(valid, ids, -1)  # a document's valid tokens are one run (docs/semantics.md#3-metadata)
                starts = np.flatnonzero(valid & (run != previous(run[None])[0]))
                docs = ids[starts]
                lengths = np.bincount(ids[valid], minlength=m + 1)[docs]
                out[f"{side}_seqlens"][r, docs - 1], out[f"{side}_offsets"][r, : len(docs)] = lengths, starts
                cu[side] += list(cu[side][-1] + np.cumsum(lengths))
                ragged[side] += list(r * len(ids) + starts)
        out = {k: v.reshape(extra + (batch, v.shape[1])) for k, v in out.items()}
        for side, t in (("q", qi.shape[1]), ("kv", ki.shape[1])):
            out[f"cu_seqlens_{side}"], out[f"ragged_offsets_{side}"] = cu[side], ragged[side] + [rows * t]
        return out

    def attention(self, p, x):
        qi, qp, ki, kp = self.checked_attention_rows(p, x)
        out = {"o": np.zeros_like(x.q), "lse": np.full((len(qi), p.heads_q, qi.shape[1]), -np.inf)}
        if p.backward:
            out.update(dq=np.zeros_like(x.q), dk=np.zeros_like(x.k), dv=np.zeros_like(x.v))
        for r in range(len(qi)):
            runs = [(iq, ik, self.document_mask(p.batch, qp[r][iq][:, None] - kp[r][ik][None, :], len(iq) - len(ik)))
                    for iq, ik in self.documents(qi[r], ki[r])]
            o, lse, *grads = attend_documents(x.q[r], x.k[r], x.v[r], x.do[r] if p.backward else None, runs,
                                              p.effective_scale)
            out["o"][r], out["lse"][r] = o, lse
            if p.backward:
                out["dq"][r], out["dk"][r], out["dv"][r] = grads
        return out


def attend_documents(q, k, v, do, runs, scale):
    """Softmax attention of each document of one token axis, forward and (given ``do``) backward.

    q, do ``[tq, Hq, D]``; k, v ``[tk, Hkv, D]``; ``runs`` holds each document's
    (query indices, key indices, ``[lq, lk]`` mask). Returns o, lse ``[Hq, tq]``
    (-inf where a query attends nothing) and dq, dk, dv (zeros without ``do``).
    The convention examples (flash_ and cudnn_convention_backend.py) use it too.
    """
    out, lse = np.zeros_like(q), np.full((q.shape[1], len(q)), -np.inf)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    g = q.shape[1] // k.shape[1]
    for iq, ik, mask in runs:
        qd, kd, vd = q[iq], np.repeat(k[ik], g, 1), np.repeat(v[ik], g, 1)
        s = np.where(mask, scale * np.einsum("qhd,khd->hqk", qd, kd), -np.inf)
        top = np.max(s, -1, keepdims=True, initial=-np.inf)
        e = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = e.sum(-1, keepdims=True)
        prob = e / np.where(total > 0, total, 1)
        out[iq] = np.einsum("hqk,khd->qhd", prob, vd)
        lse[:, iq] = np.where(total > 0, np.log(np.where(total > 0, total, 1)) + top, -np.inf)[..., 0]
        if do is not None:
            dod = do[iq]
            ds = prob * (np.einsum("qhd,khd->hqk", dod, vd) - np.einsum("qhd,qhd->hq", dod, out[iq])[..., None])
            dq[iq] = scale * np.einsum("hqk,khd->qhd", ds, kd)
            fold = lambda t: t.reshape(len(ik), k.shape[1], g, k.shape[2]).sum(2)  # noqa: E731  sum each GQA group
            dk[ik] = fold(scale * np.einsum("hqk,qhd->khd", ds, qd))
            dv[ik] = fold(np.einsum("hqk,qhd->khd", prob, dod))
    return out, lse, dq, dk, dv
