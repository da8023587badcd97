"""PyTorch context parallelism for flex attention (``torch.distributed.tensor.experimental``,
torch 2.15): its load balancers' reorder, and the forward of real CP ranks on a CPU (gloo).

``python -m attn_oracle check attn_oracle.stacks.torch_cp:Backend``

What runs is torch's own CP path for flex attention, as its tests drive it:

- the load balancer of the layout's balance, from ``torch.distributed.tensor.experimental._context_parallel``:
  ``dual_chunk_swap`` -> ``_HeadTailLoadBalancer(T, cp, "cpu")``; ``head_tail`` ->
  ``_PerDocumentHeadTailLoadBalancer(span lengths per row, cp, "cpu")``; ``contiguous`` -> no
  balancer (None: no rearrangement); ``explicit_indices`` -> a ``_LoadBalancer`` subclass whose
  ``_generate_indices`` returns the layout's indices (the protocol the base class documents:
  rank-major indices, ``restore`` their argsort);
- ``cp_permutation`` / ``cp_reorder``: that balancer's ``_generate_indices(restore=False)`` (the
  permutation, rank-major, which the base class's "Sharding contract" states) and
  ``_generate_indices(restore=inverse)`` gathered along the tokens;
- ``cp_attention`` / ``cp_rank_attention``: ``cp`` rank processes (``python -c`` subprocesses
  started by this module, connected back to it over 127.0.0.1 and joined in a gloo group, kept
  for the next call) each build the global ``BlockMask`` with
  ``create_block_mask`` over the mask_mod of ``attn_oracle.stacks.torch_flex`` (document term,
  causal top-left or bottom-right, window), shard q, k, v and the mask with
  ``_context_parallel_shard(mesh, [q, k, v, block_mask], [2, 2, 2, 0], load_balancer)`` (which
  rewrites the mask_mod for the rank's queries through ``_create_cp_block_mask``), and call
  ``flex_attention`` in a module parallelized with ``_ContextParallel(seq_dim=2,
  attention_type=FLEX)`` (its forward pre-hook all-gathers K and V, ``flex_cp_allgather``).
  Each rank's o and lse come back; rank-major, as the contract wants them.

Conventions mapped:

- The contract's head_tail spans (a document with the padding after it, a row's leading
  padding) are the balancer's ``seq_length_per_doc``, one list per row.
- The CP block mask needs ``T`` to be a multiple of ``cp * Q_BLOCK_SIZE``
  (``_create_cp_block_mask`` raises NotImplementedError otherwise): the module builds the global
  BlockMask with a block of the largest divisor of ``T / cp`` up to 128 (flex's default size).
- ``_create_cp_block_mask`` builds the rank's mask with ``torch.compile(create_block_mask,
  fullgraph=True)``, which on a CPU compiles each shape with inductor (46 s for the first one here);
  the rank processes seed that cache (``_attention._compiled_create_block_mask``) with
  ``create_block_mask`` itself, the same function uncompiled. ``ATTN_ORACLE_TORCH_CP_COMPILE=1``
  keeps torch's compiled one.
- A query that attends nothing: o = 0, lse = -inf from flex, as the suite wants; lse natural log,
  fp32 for fp16 / bf16 (as ``torch_flex``).

Domain: cp_strategies all_gather (flex CP all-gathers K/V; ``set_rotate_method`` says "FlexAttention
CP doesn't support alltoall yet", and torch's ring path is SDPA's, which takes no document mask);
cp_balances contiguous, dual_chunk_swap, head_tail, explicit_indices (no striped balancer;
``_PTRRLoadBalancer`` chooses its own block order from the BlockMask's processing times, which no
contract balance names); cp_sizes 1, 2, 3, 4 and 8 (the sizes the CP generators draw); every
mask kind, window, padding and position that ``torch_flex`` takes; self-attention on [B, T] rows.

Declined, each shown by python/tests/test_stack_torch_cp.py against torch: backward on a CPU
(``NotImplementedError: FlexAttention does not support backward on CPU``; ``outputs = ("lse",)``
there, so the suite asks for forwards only); what ``torch_flex`` declines (an invalid batch, a
side of no tokens, positions 2^62 apart).

Not served: ``cp_rank_metadata`` (flex takes a BlockMask, no cu_seqlens: torch's CP hands its kernel
no packed metadata); ``Backend`` does not define it, and the suite skips the properties that call it,
with that reason.

Invalid layouts: ``validate_cp_layout`` (and the run, which checks first) gives torch's own
refusals as the contract's codes: the head-tail balancers' AssertionError (``cp_not_divisible``
for the row, ``cp_document_not_divisible`` for a span of a row that is a multiple of cp: the
per-document balancer checks spans only, and a row off cp has a span off 2*cp) and ``_create_cp_block_mask``'s
NotImplementedError (``cp_not_divisible``). torch does not check explicit indices (a duplicate
is gathered twice): accepted, as torch does, against an expected failure
(fixtures/xfails/torch-2.15-cp-explicit-indices.txt).

Failures: a rank that raises sends back its traceback and the call raises RuntimeError with it;
a rank that does not answer within ``ATTN_ORACLE_TORCH_CP_TIMEOUT`` seconds (default 120) is
reported as hung, by rank, and so is one that died; either way every rank process of that pool is
torn down (terminate, then kill) and the next call starts a fresh pool.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import socket
import sys
import time
import traceback
from datetime import timedelta

import numpy as np

from attn_oracle.errors import AttnOracleError, Unsupported
from attn_oracle.stacks import decline, require
from attn_oracle.stacks._cp_common import check_layout_alone, cp_domain, head_tail_spans, rows_of

torch = require("PyTorch context parallelism", "torch", "torch", checked=("2.15",))
_cp = require("PyTorch context parallelism", "torch.distributed.tensor.experimental._context_parallel", "torch",
              checked=("2.15",))
from attn_oracle.stacks import torch_flex  # noqa: E402  (its mask_mod and declines)
from attn_oracle.stacks._torch_common import TORCH_DTYPES, heads_first, to_numpy  # noqa: E402

__all__ = ["Backend", "load_balancer", "RankFailure", "close_pools"]

NO_BACKWARD = ("backward on a CPU: flex_attention raises NotImplementedError (\"FlexAttention does not support "
               "backward on CPU\"); the CP backward (flex_cp_allgather_backward's reduce-scatter) needs a CUDA device")


class RankFailure(RuntimeError):
    """A CP rank raised, hung or died; the message names each rank and what happened to it."""


class _Explicit(_cp._LoadBalancer):
    """The caller's rank-major indices (explicit_indices), through the balancer protocol."""

    def __init__(self, indices):
        self.indices = torch.as_tensor(np.asarray(indices, np.int64))

    def _generate_indices(self, restore: bool = False):
        return torch.argsort(self.indices, dim=1) if restore else self.indices


def load_balancer(layout, problem):
    """torch's balancer for the layout's balance (None for contiguous: no rearrangement)."""
    ids, _ = rows_of(problem)
    b, t = ids.shape
    cp = int(layout.cp)
    if layout.balance == "contiguous":
        return None
    if layout.balance == "dual_chunk_swap":
        return _cp._HeadTailLoadBalancer(t, cp, "cpu")
    if layout.balance == "head_tail":
        return _cp._PerDocumentHeadTailLoadBalancer(
            [[end - start for start, end in head_tail_spans(ids[row])] for row in range(b)], cp, "cpu")
    if layout.balance == "explicit_indices":
        return _Explicit(layout.indices)
    raise Unsupported(f"balance {layout.balance}: torch has no balancer for it (no striped one; _PTRRLoadBalancer "
                      "picks its own block order)")


def _indices(layout, problem, restore: bool) -> np.ndarray:
    ids, _ = rows_of(problem)
    b, t = ids.shape
    lb = load_balancer(layout, problem)
    if lb is None:
        return np.broadcast_to(np.arange(t, dtype=np.int64), (b, t)).copy()
    return np.broadcast_to(lb._generate_indices(restore=restore).numpy().astype(np.int64), (b, t)).copy()


def block_size(local: int) -> int:
    """The largest divisor of the rank's tokens up to 128 (flex's default block)."""
    return max(d for d in range(1, min(local, 128) + 1) if local % d == 0)


# ---- the rank processes


def _rank_process() -> None:
    """``python -c`` entry of a rank process: connect back to the module, then serve (_rank_main)."""
    from multiprocessing.connection import Client

    rank, cp, port = (int(os.environ[f"ATTN_ORACLE_TORCH_CP_{k}"]) for k in ("RANK", "SIZE", "PORT"))
    conn = Client(("127.0.0.1", int(os.environ["ATTN_ORACLE_TORCH_CP_PARENT"])),
                  authkey=bytes.fromhex(os.environ["ATTN_ORACLE_TORCH_CP_KEY"]))
    conn.send(("rank", rank))
    _rank_main(rank, cp, port, conn, os.environ.get("ATTN_ORACLE_TORCH_CP_COMPILE") == "1")


def _rank_main(rank: int, cp: int, port: int, conn, compile_masks: bool) -> None:
    """One CP rank: join the gloo group, then answer tasks until the connection closes or says None."""
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental._context_parallel import _attention
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.nn.attention.flex_attention import create_block_mask

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cp,
                                timeout=timedelta(seconds=_timeout()))
        mesh = init_device_mesh("cpu", (cp,))
        if not compile_masks:
            _attention._compiled_create_block_mask = create_block_mask
        module = parallelize_module(_FlexModule(), mesh, _cp._ContextParallel(
            seq_dim=2, attention_type=_cp._ContextParallel.AttentionType.FLEX))
        conn.send(("ready", rank))
    except BaseException:  # noqa: BLE001 - reported to the parent, which tears the pool down
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent is gone
            break
        if task is None:
            break
        try:
            conn.send(("ok", _run_rank(task, mesh, module)))
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))
    dist.destroy_process_group()


class _FlexModule(torch.nn.Module):
    def forward(self, query, key, value, **kwargs):
        from torch.nn.attention.flex_attention import AuxRequest, flex_attention

        o, aux = flex_attention(query, key, value, return_aux=AuxRequest(lse=True), **kwargs)
        return o, aux.lse


def _run_rank(task: dict, mesh, module) -> dict:
    """This rank's forward: the global BlockMask, torch's CP shard of q, k, v and the mask, then flex."""
    from types import SimpleNamespace

    from torch.nn.attention.flex_attention import create_block_mask

    ids, pos = task["ids"], task["pos"]
    batch = SimpleNamespace(q_segment_ids=ids, q_segment_pos=pos, kv_segment_ids=ids, kv_segment_pos=pos,
                            mask=task["mask"], window=tuple(task["window"]), max_segments=task["max_segments"])
    layout = SimpleNamespace(**task["layout"])
    flex = torch_flex.Backend()
    flex.device = "cpu"
    t = flex.mask_tensors(batch)
    b, tokens = ids.shape
    block = block_size(tokens // layout.cp)
    block_mask = create_block_mask(flex.mask_mod(t, batch.mask, batch.window), b, None, tokens, tokens, device="cpu",
                                   BLOCK_SIZE=(block, block))
    dtype = TORCH_DTYPES[task["dtype"]]
    q, k, v = (heads_first(task[name], "cpu", dtype, False) for name in ("q", "k", "v"))
    lb = load_balancer(layout, SimpleNamespace(batch=batch))
    q, k, v, block_mask = _cp._context_parallel_shard(mesh, [q, k, v, block_mask], [2, 2, 2, 0], lb)
    o, lse = module(q, k, v, block_mask=block_mask, scale=task["scale"], enable_gqa=task["gqa"])
    return {"o": to_numpy(o.transpose(1, 2)), "lse": to_numpy(lse)}


def _timeout() -> float:
    return float(os.environ.get("ATTN_ORACLE_TORCH_CP_TIMEOUT", "120"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Pool:
    """``cp`` rank processes in one gloo group, started by the module and kept between calls.

    Plain ``python -c`` subprocesses that connect back over 127.0.0.1 (not multiprocessing's
    spawn, which re-imports the caller's main script in each child)."""

    def __init__(self, cp: int):
        import subprocess
        from multiprocessing.connection import Listener
        from pathlib import Path

        import attn_oracle

        key = os.urandom(16)
        listener = Listener(("127.0.0.1", 0), authkey=key)
        root = str(Path(attn_oracle.__file__).resolve().parents[1])  # where this attn_oracle is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               "ATTN_ORACLE_TORCH_CP_SIZE": str(cp), "ATTN_ORACLE_TORCH_CP_PORT": str(_free_port()),
               "ATTN_ORACLE_TORCH_CP_PARENT": str(listener.address[1]), "ATTN_ORACLE_TORCH_CP_KEY": key.hex()}
        self.cp, self.conns = cp, [None] * cp
        self.procs = [subprocess.Popen([sys.executable, "-c", "from attn_oracle.stacks.torch_cp import _rank_process; "
                                        "_rank_process()"], env={**env, "ATTN_ORACLE_TORCH_CP_RANK": str(rank)},
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)  # stderr: the worker's log
                      for rank in range(cp)]
        try:
            self._accept(listener)
        finally:
            listener.close()
        self._collect("starting the gloo group")

    def _accept(self, listener) -> None:
        """Each rank's connection, by the rank it names, within the timeout (a thread: accept blocks)."""
        import threading

        def accept():
            for _ in range(self.cp):
                conn = listener.accept()
                self.conns[conn.recv()[1]] = conn

        thread = threading.Thread(target=accept, daemon=True, name="attn-oracle-torch-cp-accept")
        thread.start()
        thread.join(_timeout())
        if thread.is_alive() or None in self.conns:
            missing = [r for r, c in enumerate(self.conns) if c is None]
            failures = [f"rank {r} " + (f"died (exit code {self.procs[r].poll()})" if self.procs[r].poll() is not None
                                        else f"did not connect in {_timeout():g} s") for r in missing]
            self.close()
            raise RankFailure(f"torch CP ({self.cp} ranks, starting): " + "; ".join(failures) +
                              " (every rank process was torn down)")

    def _collect(self, what: str) -> list:
        deadline, replies, failures = time.monotonic() + _timeout(), [None] * self.cp, []
        for rank, conn in enumerate(self.conns):
            if failures:  # a rank failed: the others may wait for it in a collective, a few seconds more
                deadline = min(deadline, time.monotonic() + 5.0)
            try:
                ready = conn.poll(max(0.0, deadline - time.monotonic()))
                reply = conn.recv() if ready else None
            except (EOFError, OSError):
                reply, ready = None, True
            if reply is None:
                code = self.procs[rank].poll()
                failures.append(f"rank {rank} died (exit code {code})" if ready or code is not None
                                else f"rank {rank} hung: no answer in {_timeout():g} s")
            elif reply[0] == "error":
                failures.append(f"rank {rank} raised:\n{reply[1]}")
            else:
                replies[rank] = reply[1]
        if failures:
            self.close()
            raise RankFailure(f"torch CP ({self.cp} ranks, {what}): " + "; ".join(failures) +
                              " (every rank process was torn down)")
        return replies

    def run(self, task: dict) -> list:
        for conn in self.conns:
            conn.send(task)
        return self._collect("a forward")

    def close(self) -> None:
        """Ask each rank to stop, then terminate and kill, each process by its own id."""
        for conn in self.conns:
            try:
                if conn is not None:
                    conn.send(None)
            except (OSError, ValueError):
                pass
        for stop in (None, "terminate", "kill"):
            for proc in self.procs:
                if proc.poll() is None and stop:
                    getattr(proc, stop)()
            deadline = time.monotonic() + 2.0
            while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
                time.sleep(0.05)
        for conn in self.conns:
            if conn is not None:
                conn.close()
        if _POOLS.get(self.cp) is self:
            del _POOLS[self.cp]
        self.conns = []


_POOLS: dict[int, _Pool] = {}


def _pool(cp: int) -> _Pool:
    if cp not in _POOLS:
        _POOLS[cp] = _Pool(cp)
    return _POOLS[cp]


@atexit.register
def close_pools() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


class Backend:
    """torch's flex attention CP: load-balanced shards, K/V all-gathered, one flex call per rank."""

    name = "torch-cp-flex"
    version = torch.__version__
    token_level_mask = True
    outputs = ("lse",)  # flex has no backward on a CPU
    domain = cp_domain(cp_strategies=("all_gather",),
                       cp_balances=("contiguous", "dual_chunk_swap", "head_tail", "explicit_indices"),
                       cp_sizes=(1, 2, 3, 4, 8), self_attention_only=True, extra_dims=False)

    def unsupported_attention_run(self, problem):
        """Why the ranks would not run this problem (the permutation and reorder take any batch)."""
        if np.asarray(problem.batch.q_segment_ids).size == 0:
            return "a batch of no tokens: flex_attention raises IndexError (a max over the empty key axis)"
        if problem.backward:
            return NO_BACKWARD
        if problem.dtype not in TORCH_DTYPES:
            return f"dtype {problem.dtype}"
        return None

    def validate_cp_layout(self, layout, problem):
        """torch's own checks, mapped to the contract's codes: the head-tail balancers' bare
        AssertionError (the row, or a span, not a multiple of 2*cp) and ``_create_cp_block_mask``'s
        NotImplementedError (T not a multiple of cp times the query block, asked with the block
        the module uses). torch checks no explicit indices (gathered as they are); a malformed
        layout (cp < 1, indices for another balance) is cp_bad_layout before any call."""
        check_layout_alone(layout)
        ids, _ = rows_of(problem)
        b, t = ids.shape
        cp = int(layout.cp)
        try:
            lb = load_balancer(layout, problem)
            if lb is not None:
                lb._generate_indices()
        except AssertionError:
            # The per-document balancer checks spans only; they tile the row, so a row off cp has one
            # off 2*cp: the row's code then, as the contract names it first (a convention mapped).
            code = "cp_document_not_divisible" if layout.balance == "head_tail" and t % cp == 0 else "cp_not_divisible"
            balancer = "_PerDocumentHeadTailLoadBalancer" if layout.balance == "head_tail" else "_HeadTailLoadBalancer"
            raise AttnOracleError(code, f"torch's {balancer} raises AssertionError (T = {t}, cp = {cp})") from None
        if t % cp:
            from torch.distributed.tensor.experimental._context_parallel._attention import _create_cp_block_mask

            class _Size:  # what _create_cp_block_mask reads before its divisibility check
                def size(self):
                    return cp

            try:
                _create_cp_block_mask(lambda *i: True, b, 1, t, t, (block_size(max(t // cp, 1)),) * 2, _Size())
            except NotImplementedError as e:
                raise AttnOracleError("cp_not_divisible", f"torch: {e}") from None

    def cp_permutation(self, layout, problem):
        return _indices(layout, problem, restore=False)

    def cp_reorder(self, layout, problem, values, width, inverse):
        index = _indices(layout, problem, restore=bool(inverse))
        return np.take_along_axis(np.asarray(values), index[..., None], axis=1)

    def _ranks(self, layout, problem, inputs) -> list:
        self.validate_cp_layout(layout, problem)
        decline(self.unsupported_attention_run(problem))
        ids, pos = rows_of(problem)
        b = problem.batch
        task = {"ids": ids, "pos": np.ascontiguousarray(pos), "mask": b.mask, "window": tuple(int(w) for w in b.window),
                "max_segments": int(b.max_segments), "dtype": problem.dtype, "scale": problem.effective_scale,
                "gqa": problem.heads_q != problem.heads_kv, "q": inputs.q, "k": inputs.k, "v": inputs.v,
                "layout": {"cp": int(layout.cp), "strategy": layout.strategy, "balance": layout.balance,
                           "stripe": int(getattr(layout, "stripe", 1) or 1),
                           "indices": None if getattr(layout, "indices", None) is None else np.asarray(layout.indices)}}
        # The batch is checked here, so that an invalid one is declined before any rank runs.
        torch_flex._validate(_Batch(task))
        key = hashlib.sha1(pickle.dumps(task)).hexdigest()  # cp_rank_attention asks each rank of one run
        if getattr(self, "_last", (None,))[0] != key:
            self._last = (key, _pool(int(layout.cp)).run(task))
        return self._last[1]

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        return self._ranks(layout, problem, inputs)[int(rank)]

    def cp_attention(self, layout, problem, inputs):
        ranks = self._ranks(layout, problem, inputs)
        return {"o": np.concatenate([r["o"] for r in ranks], axis=1),
                "lse": np.concatenate([r["lse"] for r in ranks], axis=2)}


def _Batch(task):  # noqa: N802 - a batch namespace for torch_flex's validation
    from types import SimpleNamespace

    return SimpleNamespace(q_segment_ids=task["ids"], q_segment_pos=task["pos"], kv_segment_ids=task["ids"],
                           kv_segment_pos=task["pos"], mask=task["mask"], window=task["window"],
                           max_segments=task["max_segments"])
