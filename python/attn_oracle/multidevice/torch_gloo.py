"""Context parallelism on local processes: ``attn_oracle.multidevice.torch_gloo:Backend``.

The ranks are cp processes (``python -m attn_oracle.multidevice._torch_rank``, each on a socket
pair to the driver) in one ``torch.distributed`` gloo group whose rendezvous is 127.0.0.1 on a
free port. The driver (the worker's process; it neither imports torch nor computes) cuts the row into the layout's rank-major order and sends each rank its own q, k,
v, ids and positions; each rank computes its local attention in torch (float32, autograd for
the backward), moving K/V by ``dist.all_gather``, an isend/irecv ring or
``dist.all_to_all_single`` over heads (_torch_rank.py), and sends its own tokens' answer back.

A group is started once per cp and kept for the next calls (starting four processes that
import torch took 20 s on two busy cores); at most ``max_processes`` ranks live at once (by
default every group of cp 1 to ``max_ranks``), the least recently used group is closed first. Each call has ``timeout_s`` (``ATTN_ORACLE_CP_TIMEOUT``, default 120 s):
a rank that raises, dies or does not answer in time fails the call with :class:`RankFailed`
or :class:`RankHung`, naming the rank and the step (and where each other rank waits), and the
whole group is killed and reaped first, never left behind: a later call starts a new one.
Ranks also exit when the driver's process is gone. Subprocesses rather than multiprocessing's
spawn, which would import the driver's ``__main__`` again in every rank.

Precision and domain as the JAX runner's (jax_shard_map.py): float32 for every dtype, ids and
positions within int32.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from multiprocessing import connection

import numpy as np

from ..errors import Unsupported
from . import _host

if importlib.util.find_spec("torch") is None:
    raise ImportError("attn_oracle.multidevice.torch_gloo needs torch (the ranks import it; the driver does not)")

# Where a rank waits on the others (_torch_rank.PHASES), read here without importing torch.
COLLECTIVES = frozenset(("all_gather", "ring send/recv", "all_to_all", "returning dk/dv (reduce-scatter)",
                         "returning dk/dv (ring send/recv)"))

DEFAULT_TIMEOUT_S = float(os.environ.get("ATTN_ORACLE_CP_TIMEOUT", "120"))
# A rank process holds about 580 MB (torch's CUDA build, measured on the CPU): cp up to 4 by default,
# ten processes with every group kept; ATTN_ORACLE_CP_RANKS=8 takes cp up to 8.
DEFAULT_RANKS = int(os.environ.get("ATTN_ORACLE_CP_RANKS", "4"))


class RankFailed(RuntimeError):
    """A rank raised or died during a call; ``rank`` and ``step`` say which and where."""

    def __init__(self, message, rank, step):
        super().__init__(message)
        self.rank, self.step = rank, step


class RankHung(RankFailed):
    """A rank did not answer in time: ``rank`` is the one outside any collective (the others wait on it)."""


# ------------------------------------------------------------------ the driver's side
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Group:
    """cp rank processes in one gloo group, each on a socket pair of its own to the driver."""

    def __init__(self, cp: int, start_timeout_s: float, timeout_s: float):
        self.cp, self.conns, self.procs = cp, [], []
        self.where = [("starting", 0)] * cp
        port = _free_port()
        # The children import this package and, by name, any planted hook: they get our sys.path.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
        for rank in range(cp):
            mine, theirs = socket.socketpair()
            argv = [sys.executable, "-m", "attn_oracle.multidevice._torch_rank", str(rank), str(cp), str(port),
                    str(theirs.fileno()), str(os.getpid()), str(timeout_s)]
            # stdout onto stderr: the worker's stdout belongs to its protocol
            self.procs.append(subprocess.Popen(argv, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                               stdout=2))
            theirs.close()
            self.conns.append(connection.Connection(mine.detach()))
        self._collect("starting the group", time.monotonic() + start_timeout_s)

    def pids(self) -> list:
        return [p.pid for p in self.procs]

    def call(self, op: str, per_rank: list, hook, timeout_s: float, what: str) -> list:
        for r, (conn, args) in enumerate(zip(self.conns, per_rank)):
            try:
                conn.send((op, args, hook))
            except OSError:  # the rank is gone since the last call
                self._failed(what, {r: ("died", self._exit_code(r), 0, "idle")}, set())
        return self._collect(what, time.monotonic() + timeout_s)

    def _collect(self, what: str, deadline: float) -> list:
        answers, pending = [None] * self.cp, set(range(self.cp))
        while pending:
            ready = connection.wait([self.conns[r] for r in pending], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self._hung(what, pending)
            for conn in ready:
                r = self.conns.index(conn)
                event = self._read(r)
                if event is None:
                    continue
                if event[0] != "ok":
                    self._failed(what, {r: event}, pending - {r})
                answers[r] = event[1]
                pending.discard(r)
        return answers

    def _read(self, r: int):
        """The next event of rank r: ("ok", answer), ("raised", message, traceback, step, phase),
        ("died", exit code, step, phase), or None for a progress note."""
        try:
            message = self.conns[r].recv()
        except (EOFError, OSError):  # the process ended without a word
            return ("died", self._exit_code(r), self.where[r][1], self.where[r][0])
        if message[0] == "at":
            self.where[r] = tuple(message[1:])
            return None
        if message[0] == "error":
            return ("raised", message[1], message[2], message[3], self.where[r][0])
        return message

    def _failed(self, what: str, events: dict, others: set) -> None:
        """A rank raised or died: the others' errors follow within moments (a peer gone breaks their
        collectives), so gather them for a second, then name the cause: a rank that died, else one
        that raised outside a collective, else the first."""
        grace = time.monotonic() + 1.0
        while others and time.monotonic() < grace:
            for conn in connection.wait([self.conns[r] for r in others], timeout=max(0.0, grace - time.monotonic())):
                r = self.conns.index(conn)
                event = self._read(r)
                if event is not None:
                    others.discard(r)
                    if event[0] != "ok":
                        events[r] = event
        self.close(kill=True)
        order = sorted(events, key=lambda r: (events[r][0] != "died", events[r][-1] in COLLECTIVES))
        r, e = order[0], events[order[0]]
        said = {"died": lambda e: f"died (exit code {e[1]}) in step {e[2]} ({e[3]})",
                "raised": lambda e: f"raised in step {e[3]} ({e[4]}): {e[1]}"}
        also = "".join(f"\n  then rank {o} {said[events[o][0]](events[o]).splitlines()[0]}" for o in order[1:])
        trace = f"\n{e[2]}" if e[0] == "raised" else ""
        raise RankFailed(f"{what}: rank {r} {said[e[0]](e)}{also}{trace}\nEvery rank process was killed.",
                         r, e[2] if e[0] == "died" else e[3])

    def _exit_code(self, r):
        try:
            return self.procs[r].wait(5)
        except subprocess.TimeoutExpired:
            return None

    def _hung(self, what: str, pending: set) -> None:
        where = {r: self.where[r] for r in sorted(pending)}
        self.close(kill=True)
        waits = {r: phase in COLLECTIVES for r, (phase, _) in where.items()}
        stuck = [r for r in where if not waits[r]] or sorted(where, key=lambda r: (where[r][1], r))[:1]
        said = "; ".join(f"rank {r} in step {step} ({phase}{', waiting on the others' if waits[r] else ''})"
                         for r, (phase, step) in where.items())
        r = stuck[0]
        raise RankHung(f"{what}: rank {r} hung in step {where[r][1]} ({where[r][0]}); no answer within the "
                       f"timeout from: {said}. Every rank process was killed.", r, where[r][1])

    def close(self, kill: bool = False) -> None:
        """Stop the ranks (kill: at once) and reap them: no process is left behind."""
        if not kill:
            for conn in self.conns:
                try:
                    conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + (0 if kill else 5)
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
            p.wait()
        for conn in self.conns:
            conn.close()
        self.conns = []


class Backend(_host.HostSide):
    """The context_parallel capability on a gloo group of local processes (module docstring)."""

    name = "torch-gloo"
    version = importlib.metadata.version("torch")
    token_level_mask = True
    step_hook = None  # a picklable hook(rank, step) each rank calls as a step begins: tests plant faults here

    def __init__(self, max_ranks: int = DEFAULT_RANKS, max_processes: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S,
                 start_timeout_s: float = 300.0):
        self.max_ranks = max_ranks
        self.max_processes = max_processes or max_ranks * (max_ranks + 1) // 2  # default: every cp's group kept
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self.domain = _host.domain(range(1, max_ranks + 1))
        self._groups: OrderedDict[int, _Group] = OrderedDict()
        atexit.register(self.close)

    def close(self) -> None:
        """Stop every rank process."""
        while self._groups:
            self._groups.popitem()[1].close()

    def pids(self) -> list:
        """The live rank processes, every group."""
        return [pid for g in self._groups.values() for pid in g.pids()]

    def _group(self, cp: int) -> _Group:
        if cp in self._groups:
            self._groups.move_to_end(cp)
            return self._groups[cp]
        while self._groups and sum(g.cp for g in self._groups.values()) + cp > self.max_processes:
            self._groups.popitem(last=False)[1].close()
        self._groups[cp] = _Group(cp, self.start_timeout_s, self.timeout_s)
        return self._groups[cp]

    def _call(self, layout, op: str, shared: dict, per_rank: list, what: str) -> list:
        group = self._group(layout.cp)
        args = [{**shared, **mine} for mine in per_rank]
        hook = getattr(self.step_hook, "__func__", self.step_hook)  # a function set on the class comes back bound
        try:
            return group.call(op, args, hook, self.timeout_s, f"{what} ({layout.strategy}, cp {layout.cp})")
        except BaseException:
            self._groups.pop(layout.cp, None)  # closed already when a rank failed; a driver-side error closes it here
            group.close(kill=True)
            raise

    @staticmethod
    def _slices(rm, cp: int, names) -> list:
        local = rm.ids.shape[1] // cp
        return [{n: np.ascontiguousarray(getattr(rm, n)[:, r * local:(r + 1) * local]) for n in names}
                for r in range(cp)]

    def _shared(self, layout, rm, steps):
        return {"strategy": layout.strategy, "steps": steps, "params": [int(v) for v in rm.params],
                "scale": rm.scale}

    def cp_rank_metadata(self, layout, problem, rank, step):
        rm = self._checked(layout, problem, with_tensors=False)
        _host.check_rank_step(layout, rank, step)
        _check_rank_order(layout, rm, rank, step)
        shared = {**self._shared(layout, rm, step + 1), "step": step, "want": rank,
                  "q": None, "k": None, "v": None, "do": None}
        answers = self._call(layout, "step_metadata", shared, self._slices(rm, layout.cp, ("ids", "pos", "tok")),
                             f"metadata of rank {rank}, step {step}")
        return {k: np.asarray(v, np.int64) for k, v in answers[rank].items()}

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        rm = self._checked(layout, problem, inputs)
        _host.check_rank_step(layout, rank, step)
        shared = {**self._shared(layout, rm, step + 1), "step": step, "want": rank, "do": None}
        answers = self._call(layout, "step_attention", shared,
                             self._slices(rm, layout.cp, ("q", "k", "v", "ids", "pos", "tok")),
                             f"attention of rank {rank}, step {step}")
        return answers[rank]

    def cp_attention(self, layout, problem, inputs):
        rm = self._checked(layout, problem, inputs)
        names = ("q", "k", "v", "ids", "pos", "tok") + (("do",) if problem.backward else ())
        shared = {**self._shared(layout, rm, _host.steps(layout))} | ({} if problem.backward else {"do": None})
        answers = self._call(layout, "run", shared, self._slices(rm, layout.cp, names), "cp_attention")
        out = {"o": np.concatenate([a["o"] for a in answers], 1), "lse": np.concatenate([a["lse"] for a in answers], 2)}
        if problem.backward:
            out.update({n: np.concatenate([a[n] for a in answers], 1) for n in ("dq", "dk", "dv")})
        return out


def _check_rank_order(layout, rm, rank, step):
    """Explicit indices that put a rank's tokens out of row order leave its problem no packed batch."""
    if layout.balance != "explicit_indices" or layout.strategy == "all_to_all":
        return
    local = rm.ids.shape[1] // layout.cp
    for r in {rank, (rank - step) % layout.cp}:
        part = slice(r * local, (r + 1) * local)
        if not _host.rank_batch_is_packed(rm.ids[:, part], rm.pos[:, part]):
            raise Unsupported(f"explicit indices that put rank {r}'s tokens out of row order: its problem is not "
                              "a packed batch, whose metadata docs/semantics.md#3-metadata defines")
