"""One rank of the torch gloo runner: ``python -m attn_oracle.multidevice._torch_rank RANK CP PORT
FD DRIVER_PID TIMEOUT``, started by torch_gloo.py. It joins the gloo group (rendezvous on
127.0.0.1:PORT), then answers the driver's tasks on the socket FD: its local attention in torch,
K/V moved by torch.distributed collectives, autograd for the local gradients and the
collectives' transposes written out to bring dk/dv to their owners.

Every op gets the rank's own slice of the rank-major arrays ([B, L, ...], L = T / cp) and
returns the rank's own answer. As it goes, the rank tells the driver where it is (a phase and
a step), so that the driver can say which rank hung, and where the others wait.
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np
import torch
import torch.distributed as dist

# Where a rank is. The collectives are the phases in which a rank waits on others.
PHASES = ("starting", "computing", "all_gather", "ring send/recv", "all_to_all",
          "returning dk/dv (reduce-scatter)", "returning dk/dv (ring send/recv)")
COLLECTIVES = frozenset(PHASES[2:])


def _buffer(like):
    """A contiguous tensor of like's shape (empty_like keeps a transposed view's strides, and the
    collectives write their buffers as contiguous memory)."""
    return torch.empty(like.shape, dtype=like.dtype)


class Rank:
    """This process's rank: its place in the group, its line to the driver, the planted step hook."""

    def __init__(self, rank, cp, conn, hook=None):
        self.rank, self.cp, self.conn, self.hook = rank, cp, conn, hook
        self.where = None

    def at(self, phase: str, step: int) -> None:
        if (phase, step) != self.where:
            self.where = (phase, step)
            self.conn.send(("at", phase, step))

    def begin_step(self, step: int) -> None:
        self.at("computing", step)
        if self.hook is not None:  # tests plant a rank that hangs or raises here
            self.hook(self.rank, step)

    # -------------------------------------------------------------- collectives
    def all_gather(self, x, step=0):
        """[B, L, ...] of every rank, rank-major: [B, cp * L, ...]."""
        self.at("all_gather", step)
        parts = [_buffer(x) for _ in range(self.cp)]
        dist.all_gather(parts, x.contiguous())
        self.at("computing", step)
        return torch.cat(parts, 1)

    def send_recv(self, tensors, to, frm, step, phase="ring send/recv"):
        """Each tensor sent to rank `to` while the same shapes come from rank `frm` (tags keep them apart)."""
        self.at(phase, step)
        got = [_buffer(t) for t in tensors]
        reqs = []
        for tag, (t, g) in enumerate(zip(tensors, got)):
            reqs.append(dist.isend(t.contiguous(), to, tag=tag))
            reqs.append(dist.irecv(g, frm, tag=tag))
        for r in reqs:
            r.wait()
        self.at("computing", step)
        return got

    def all_to_all(self, chunks, step=0, phase="all_to_all"):
        """chunks [cp, ...]: chunk j goes to rank j; returns [cp, ...], chunk j from rank j."""
        self.at(phase, step)
        out = _buffer(chunks)
        dist.all_to_all_single(out, chunks.contiguous())
        self.at("computing", step)
        return out


# ------------------------------------------------------------------ mask, attention, merge
def mask(q_ids, q_pos, k_ids, k_pos, params, window=True):
    """[B, Lq, Lk] bool: the token-level mask of a top-left kind (params: causal, left, right, M)."""
    causal, left, right = (int(v) for v in params[:3])
    d = q_pos[:, :, None] - k_pos[:, None, :]
    m = (q_ids[:, :, None] == k_ids[:, None, :]) & (q_ids[:, :, None] != 0)
    if causal:
        m &= d >= 0
    if window and left >= 0:
        m &= d <= left
    if window and right >= 0:
        m &= -d <= right
    return m


def attend(q, k, v, m, scale):
    """o [B, Lq, Hq, D], lse [B, Hq, Lq]; a query attending nothing: o = 0, lse = -inf, finite gradients."""
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = s.masked_fill(~m[:, None], float("-inf"))
    top = s.detach().amax(-1)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp(s - top[..., None])
    total = p.sum(-1)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    o = torch.einsum("bhqk,bkhd->bqhd", p / safe[..., None], v)
    return o, torch.where(total > 0, top + torch.log(safe), torch.full_like(top, float("-inf")))


def merge(o, lse, o2, lse2):
    """Two partial results over disjoint keys, merged by lse (logaddexp, o rescaled)."""
    top = torch.maximum(lse, lse2).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    a, b = torch.exp(lse - top), torch.exp(lse2 - top)
    total = a + b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    wa, wb = ((w / safe).transpose(1, 2)[..., None] for w in (a, b))
    return wa * o + wb * o2, torch.where(total > 0, top + torch.log(safe), torch.full_like(top, float("-inf")))


def by_token(x, tokens, axis=1):
    """x's entries along `axis` taken at `tokens` [B, N]."""
    shape = [1] * x.ndim
    shape[0], shape[axis] = tokens.shape
    return torch.take_along_dim(x, tokens.reshape(shape), dim=axis)


# ------------------------------------------------------------------ the strategies
def _heads_for_tokens(me, x, step=0):
    """all_to_all: [B, L, H, D] (my tokens, every head) -> [B, cp * L, H / cp, D] (every token, rank-major, my heads)."""
    b, length, h, d = x.shape
    got = me.all_to_all(x.reshape(b, length, me.cp, h // me.cp, d).permute(2, 0, 1, 3, 4), step)
    return got.permute(1, 0, 2, 3, 4).reshape(b, me.cp * length, h // me.cp, d)


def _tokens_for_heads(me, x, phase="all_to_all"):
    """The inverse: [B, cp * L, h, D] rank-major -> [B, L, cp * h, D] (my tokens, every head)."""
    b, t, h, d = x.shape
    got = me.all_to_all(x.reshape(b, me.cp, t // me.cp, h, d).transpose(0, 1), phase=phase)
    return got.permute(1, 2, 0, 3, 4).reshape(b, t // me.cp, me.cp * h, d)


def rank_problems(me, a, with_tensors=True):
    """Each step's (q, k, v, q_ids, q_pos, kv_ids, kv_pos) of this rank (context_parallel.hpp's
    cp_rank_problem), K/V moved by collectives: the gathered row in row order; at ring step s, the
    keys of rank r - s, s hops away; all_to_all, the whole row for this rank's heads."""
    q, k, v, ids, pos, tok = (a[n] for n in ("q", "k", "v", "ids", "pos", "tok"))
    strategy = a["strategy"]
    if strategy == "ring":
        held = [k, v, ids, pos] if with_tensors else [ids, pos]
        for s in range(a["steps"]):
            me.begin_step(s)
            if s:
                held = me.send_recv(held, (me.rank + 1) % me.cp, (me.rank - 1) % me.cp, s)
            kk, vv = (held[0], held[1]) if with_tensors else (None, None)
            yield q, kk, vv, ids, pos, held[-2], held[-1]
        return
    me.begin_step(0)
    tok_all = me.all_gather(tok)
    order = torch.argsort(tok_all, 1)
    rid, rpos = (by_token(me.all_gather(x), order) for x in (ids, pos))
    if strategy == "all_gather":
        kk, vv = (by_token(me.all_gather(x), order) for x in (k, v)) if with_tensors else (None, None)
        yield q, kk, vv, ids, pos, rid, rpos
    else:
        qkv = [by_token(_heads_for_tokens(me, x), order) for x in (q, k, v)] if with_tensors else [None] * 3
        yield (*qkv, rid, rpos, rid, rpos)


def run(me, a):
    """The whole run on this rank: o, lse and, with do, dq, dk, dv of its own tokens."""
    backward, scale, params = a["do"] is not None, a["scale"], a["params"]
    strategy, leaves, o, lse = a["strategy"], [], None, None
    q = a["q"].requires_grad_(backward) if strategy != "all_to_all" else None
    for qq, kk, vv, qid, qpos, kid, kpos in rank_problems(me, a):
        if strategy == "all_to_all":
            q = qq.requires_grad_(backward)
        kk, vv = (x.detach().requires_grad_(backward) for x in (kk, vv))
        leaves.append((kk, vv))
        part = attend(q, kk, vv, mask(qid, qpos, kid, kpos, params), scale)
        o, lse = part if o is None else merge(o, lse, *part)
    do = a["do"]
    if strategy == "all_to_all":
        tok_all = me.all_gather(a["tok"])
        do = by_token(_heads_for_tokens(me, do), torch.argsort(tok_all, 1)) if backward else None
        out_o = _tokens_for_heads(me, by_token(o.detach(), tok_all))
        out_lse = _tokens_for_heads(me, by_token(lse.detach(), tok_all, 2).transpose(1, 2)[..., None])[..., 0]
        out = {"o": out_o, "lse": out_lse.transpose(1, 2)}
    else:
        out = {"o": o.detach(), "lse": lse.detach()}
    if not backward:
        return out
    flat = [x for pair in leaves for x in pair]
    dq, *dkv = torch.autograd.grad(o, [q] + flat, do, allow_unused=True)
    dkv = [torch.zeros_like(x) if g is None else g for x, g in zip(flat, dkv)]
    out.update(zip(("dq", "dk", "dv"), _gradients_home(me, a, dq, dkv)))
    return out


def _gradients_home(me, a, dq, dkv):
    """dq, dk, dv of this rank's own tokens: the transposes of the collectives that moved q, k, v."""
    strategy, cp = a["strategy"], me.cp
    if strategy == "ring":  # step s met rank r - s's keys: send their gradients back, s ranks down
        dk, dv = dkv[0], dkv[1]
        for s in range(1, cp):
            got = me.send_recv(dkv[2 * s:2 * s + 2], (me.rank - s) % cp, (me.rank + s) % cp, s,
                               "returning dk/dv (ring send/recv)")
            dk, dv = dk + got[0], dv + got[1]
        return dq, dk, dv
    tok_all = me.all_gather(a["tok"])
    if strategy == "all_to_all":  # each rank holds its heads of every token: the all_to_all back
        return (_tokens_for_heads(me, by_token(g, tok_all), "returning dk/dv (reduce-scatter)")
                for g in (dq, *dkv))
    homes = []  # all_gather: reduce-scatter, written as an all_to_all of each rank's chunk and a sum
    for g in dkv:
        g = by_token(g, tok_all)  # row order -> rank-major
        b, t = g.shape[:2]
        chunks = g.reshape(b, cp, t // cp, *g.shape[2:]).transpose(0, 1)
        homes.append(me.all_to_all(chunks, phase="returning dk/dv (reduce-scatter)").sum(0))
    return (dq, *homes)


def step_attention(me, a):
    """This rank's forward at a['step'] (computed by the wanted rank only; every rank moves K/V)."""
    for s, (qq, kk, vv, qid, qpos, kid, kpos) in enumerate(rank_problems(me, a)):
        if s == a["step"]:
            if me.rank != a["want"]:
                return None
            o, lse = attend(qq, kk, vv, mask(qid, qpos, kid, kpos, a["params"]), a["scale"])
            return {"o": o, "lse": lse}
    raise AssertionError("no such step")


def _side_metadata(ids, valid, m):
    """seqlens [B, M], offsets [B, M+1], cu_seqlens and ragged_offsets [S+1]: docs/semantics.md#3-metadata."""
    rows, length = ids.shape
    one_hot = (ids[:, :, None] == torch.arange(1, m + 1, dtype=ids.dtype)) & valid[:, :, None]
    seqlens = one_hot.sum(1)
    first = torch.where(one_hot, torch.arange(length)[None, :, None], torch.tensor(length)).amin(1)
    has = seqlens > 0
    order = torch.argsort((~has).to(torch.int8), dim=1, stable=True)  # documents with tokens first, slot order
    offsets = torch.where(has.gather(1, order), first.gather(1, order), torch.tensor(-1))
    offsets = torch.cat([offsets, torch.full((rows, 1), -1, dtype=offsets.dtype)], 1)
    lengths = seqlens[has]  # row-major, slot order: the compacted documents
    starts = (first + (torch.arange(rows) * length)[:, None])[has]
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    ragged = torch.cat([starts, torch.tensor([rows * length])])
    return seqlens, offsets, cu, ragged


def step_metadata(me, a):
    """This rank's metadata at a['step'], from the ids and positions it holds (int64)."""
    for s, (_, _, _, qid, qpos, kid, kpos) in enumerate(rank_problems(me, a, with_tensors=False)):
        if s == a["step"]:
            if me.rank != a["want"]:
                return None
            attends = mask(qid, qpos, kid, kpos, a["params"], window=False)  # metadata ignores the window
            m = int(a["params"][3])
            sq, oq, cq, rq = _side_metadata(qid.long(), attends.any(2), m)
            sk, ok, ck, rk = _side_metadata(kid.long(), attends.any(1), m)
            return {"q_seqlens": sq, "kv_seqlens": sk, "q_offsets": oq, "kv_offsets": ok, "cu_seqlens_q": cq,
                    "cu_seqlens_kv": ck, "ragged_offsets_q": rq, "ragged_offsets_kv": rk}
    raise AssertionError("no such step")


OPS = {"run": run, "step_attention": step_attention, "step_metadata": step_metadata}


# ------------------------------------------------------------------ the process
def _exit_with_driver(driver_pid: int) -> None:
    """Leave when the driver's process is gone, even inside a collective that never ends."""
    def watch():
        while True:
            time.sleep(0.5)
            try:
                os.kill(driver_pid, 0)
            except ProcessLookupError:
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def _tensor(a: np.ndarray):
    """Floats as sent (float32); ids, positions and token numbers as int64, which torch indexes with."""
    return torch.from_numpy(a).long() if a.dtype.kind in "iu" else torch.from_numpy(a)


def main(argv) -> int:
    rank, cp, port, fd, driver_pid = (int(a) for a in argv[:5])
    timeout_s = float(argv[5])
    _exit_with_driver(driver_pid)
    conn = Connection(fd)
    torch.set_num_threads(1)  # cp processes share the cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cp,
                            timeout=datetime.timedelta(seconds=timeout_s + 30))
    conn.send(("ok", None))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            break
        if task is None:  # stop: exit at once (destroy_process_group waits on the others for seconds)
            break
        op, args, hook = task
        me = Rank(rank, cp, conn, hook)
        try:
            tensors = {k: _tensor(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
            out = OPS[op](me, tensors)
            conn.send(("ok", None if out is None else {k: v.detach().numpy() for k, v in out.items()}))
        except BaseException as e:  # the driver tears the group down: its collectives are out of step now
            step = me.where[1] if me.where else 0
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc(), step))
            return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: gloo's threads would hold it
