"""ring-flash-attn (PyPI ``ring-flash-attn`` 0.1.8): the per-rank and per-step ``cu_seqlens`` of its
llama3 (all-gather) and zigzag (ring) varlen context parallelism, and its lse merge.

``python -m attn_oracle check attn_oracle.stacks.ring_flash_attn_cp:Llama3`` (and ``:Zigzag``)

Every ring / zigzag / llama3 function of the package runs flash-attn's CUDA kernels
(``flash_attn.flash_attn_interface._flash_attn_varlen_forward`` and friends); what is plain
torch is the preparation around them:

- ``llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, causal, rank, world_size)``: from the
  ``cu_seqlens`` of the whole packed stream, rank ``rank``'s ``cu_seqlens_q`` (its slice),
  ``cu_seqlens_k`` and ``local_k_slice`` (the keys its queries need, out of the all-gathered K/V),
  ``max_seqlen_q/k`` (what ``llama3_flash_attn_varlen_func`` and the Hugging Face adapter's
  ``update_ring_flash_attn_params`` hand the kernel);
- ``zigzag_ring_flash_attn_varlen_func``'s ring loop: which queries and keys each step's kernel
  call gets (``get_half_index`` of the local ``cu_seqlens``: every query against the source's
  front halves while the source rank is below this one, the back halves of the queries against
  every key after) and with which ``cu_seqlens`` (the local ones, or ``cu_seqlens // 2``);
- ``ring_flash_attn.utils.update_out_and_lse``: the merge of two partial results by their lse
  (what every ring function does between steps).

``Llama3`` (all_gather, contiguous): ``cp_permutation`` is the split the README prescribes
(``torch.chunk(input_ids, world_size, dim=1)[rank]``: rank r holds tokens [r*L, (r+1)*L));
``cp_rank_metadata`` calls ``llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, causal, rank, cp)``
with ``causal`` the mask kind's causal term; ``cp_merge`` calls ``update_out_and_lse``.

``Zigzag`` (ring, head_tail): ``cp_permutation`` is the split of the package's own tests
(``test/test_zigzag_ring_flash_attn_varlen_func.py``'s ``extract_local``: each document chunked
in 2*cp, rank r taking chunks r and 2*cp-1-r; the package has no function for it);
``cp_rank_metadata`` runs ``zigzag_ring_flash_attn_varlen_func`` itself on rank ``rank``'s local
slot numbers, with the local ``cu_seqlens`` those tests pass (``cu_seqlens // world_size``),
``causal=True``, and records each step's kernel call: flash-attn's kernel is stood in by a
recorder and the ring's transport by ``_LoopbackComm`` (a ``RingComm`` whose send_recv returns
what it sends: each rank's keys are its local slot numbers, the same numbers on every rank, so
what arrives is what rank ``(rank - step) mod cp`` sends; ``RingComm`` receives from rank - 1),
under torch's fake process group for the rank and size. Step s's call is rank ``rank``'s
problem at step s: its queries' and keys' local slots give the spans, its ``cu_seqlens_q/k``
their lengths.

Conventions mapped:

- The package takes one packed stream ([total_tokens, H, D], one ``cu_seqlens``): one row of the
  suite's batch (``max_rows=1``), its documents in order, no padding token (``cu_seqlens`` has no
  gap; the README packs with position_ids).
- ``cu_seqlens_q`` is the rank's metadata of docs/semantics.md#3-metadata as it is (every local query is valid: it
  attends itself or, without the causal term, its document); ``ragged_offsets_q`` its starts.
- ``cu_seqlens_k`` counts from ``local_k_slice.start`` in the gathered K/V, which is the row in row
  order: ``ragged_offsets_kv = local_k_slice.start + cu_seqlens_k[:-1]``. With ``causal`` the last
  document's keys end at the rank's last query, the others are whole: the keys the rank's queries
  attend (docs/semantics.md#3-metadata's valid kv tokens). The kernel is then called with ``causal=causal``; FA2
  aligns causal bottom-right, which on these spans is the top-left causal of the positions.
- ``max_seqlen_q`` / ``max_seqlen_k`` are returned (the optional fields, judged exactly).
- ``update_out_and_lse`` keeps ``out`` [tokens, H, D] and ``lse`` [tokens, H, 1] in float32 and
  takes a block's lse as FA returns it, [H, tokens]; the module moves the contract's
  ``o [rows, tokens, heads, d]``, ``lse [rows, heads, tokens]`` in and out of those shapes.

Domain of ``Llama3``: cp_strategies all_gather, cp_balances contiguous, cp 1, 2, 3, 4 and 8, one row, no padding, every
mask kind (the bottom-right kinds equal the top-left ones on self-attention, and the rank
problem writes them top-left), no window (the README's "Known Limitations": "window_size is
not supported"), positions any (the package reads none; the causal term on self-attention
follows token order). ``Zigzag``: ring, head_tail, cp 1, 2, 3, 4 and 8, one row, no padding, no window, the
causal kinds (``zigzag_ring_flash_attn_varlen_forward`` asserts "zigzag ring is meaningless for
causal=False").

Invalid layouts (``validate_cp_layout``; the rank metadata checks first): ``Llama3`` gives the
package's assertion that the stream is a multiple of world_size as ``cp_not_divisible``; ``Zigzag``
accepts what the package accepts, which checks nothing (a document not a multiple of 2*cp is
divided silently: the contract's ``cp_document_not_divisible`` is not given, a limitation
``context_parallel/invalidLayoutsAreRejectedExactly`` reports). A malformed layout (cp < 1,
indices for another balance) is ``cp_bad_layout`` before any call.

Attention (``cp_attention``, ``cp_rank_attention``): the package's own CP code runs whole on one
device, every rank a thread (:mod:`attn_oracle.multidevice.threads`): each calls
``llama3_flash_attn_varlen_func`` (heads_k_stride 1) or ``zigzag_ring_flash_attn_varlen_func`` on its
shard, with the package's ``AllGatherComm`` / ``RingComm`` / ``dist.reduce_scatter_tensor`` carried
between the threads (``_ThreadAllGather``, ``_ThreadRingComm``, ``_ThreadDist``), so its own
``update_out_and_lse`` merges the ring's blocks; with backward, the package's
``llama3_flash_attn_varlen_backward`` / ``zigzag_ring_flash_attn_varlen_backward`` run on the forward's
out and lse, as its autograd Functions call them (called directly: a CUDA autograd backward runs on
one device thread, where a rank waiting for another would deadlock). A ring step's partial
(``cp_rank_attention``) is that step's forward kernel call as the ring made it. The kernels
(:func:`kernels`): flash-attn's where it imports; else torch's own FlashAttention-2
(``aten::_flash_attention_forward`` / ``_backward``, flash-attn's signature over them:
stacks/_flash_varlen.py), which torch builds for CUDA; without a CUDA device (and without a CPU
kernel registered, as python/tests/flash_varlen_standin.py does for the tests) the two calls are
not defined and the suite skips the properties that call them (``NO_KERNELS``). Domain: FA2's fp16
and bf16, head dims 8 to 256 (in fp32, which FA2 never takes, the zigzag backward's
``dq = dq_buffer.to(torch.float32)`` is the buffer itself, and the next kernel call overwrites it).

Importing it. The package's ``__init__`` imports every kernel module (each imports flash-attn) and
its Hugging Face adapter, which imports ``is_flash_attn_greater_or_equal_2_10`` from
``transformers.modeling_flash_attention_utils``: gone in transformers 5.24 (the torch venv's), so
0.1.8 does not import beside it even with flash-attn (the package declares no transformers
requirement; a limitation of that pairing, in docs/stacks.md). Where ``import ring_flash_attn``
fails, the module runs the two files it calls, ``utils.py`` and ``llama3_flash_attn_varlen.py``,
as they are, as submodules of a package object whose ``__init__`` is not run; where flash-attn
is absent too, ``flash_attn.flash_attn_interface`` is stood in for that import by kernels that
raise the reason above (and removed from ``sys.modules`` right after, so only those modules hold
it). ``LOADED_AS`` says which way it went.

Disagreement (a convention; no documentation of the package says how a part that attends nothing
merges): ``update_out_and_lse`` with a running part of lse = -inf and a block of finite lse gives
the block's o but lse NaN (``lse - logsigmoid(lse - block_lse)`` is -inf - -inf), and two parts of
lse = -inf give o and lse NaN; with FA2's own +inf for a query without keys, a running +inf keeps
o = 0, lse = +inf and drops the block. The contract merges a part that attends nothing as nothing.
Inside the package no such part is merged (each ring's step 0 is the diagonal block, where a query
attends itself, and its later blocks are whole chunks of the query's document); ``cp_merge`` maps
the -inf cases: the other part's lse where the running one attends nothing, o = 0 and lse = -inf
where neither does (the finite cases are the package's answer as it is).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import pickle
import sys
import threading
import types

import numpy as np

from attn_oracle import packing
from attn_oracle.domain import CAUSAL_KINDS, framework_dtypes, is_causal
from attn_oracle.errors import AttnOracleError, Unsupported
from attn_oracle.multidevice import threads
from attn_oracle.stacks import StackUnavailable, check_version, installed_version, require

from attn_oracle.stacks._cp_common import check_layout_alone, cp_domain, fake_process_group, rank_batch, rows_of

torch = require("ring-flash-attn", "torch", "torch", checked=("2.15",))
from attn_oracle.stacks import _flash_varlen  # noqa: E402 - imports torch, which require() checked

__all__ = ["Llama3", "Zigzag", "NO_KERNELS", "kernels", "load", "prepare_cu_seqlens", "zigzag_kernel_calls"]

VERSION = installed_version("ring-flash-attn")
NO_KERNELS = ("ring-flash-attn's attention is flash-attn's CUDA varlen kernels (flash_attn.flash_attn_interface."
              "_flash_attn_varlen_forward), which need a CUDA GPU; flash_attn does not import here, and torch's own "
              "FlashAttention-2, which stands in for it, has no kernel without a CUDA device")


def _kernel_standin(*args, **kwargs):
    raise RuntimeError(NO_KERNELS)


def load():
    """ring-flash-attn's ``utils``, ``llama3_flash_attn_varlen`` and ``zigzag_ring_flash_attn_varlen`` modules: the package as it is where
    it imports; else those two files run as submodules of a package object whose ``__init__`` is
    not run, with flash-attn's kernels stood in by functions that raise where flash-attn is absent
    (see the module's docstring)."""
    try:
        package = importlib.import_module("ring_flash_attn")
    except Exception as e:  # noqa: BLE001 - why is said in the note below
        LOADED_AS.append(f"its __init__ does not import here ({type(e).__name__}: {str(e).splitlines()[0]}); "
                         "utils.py and llama3_flash_attn_varlen.py loaded alone")
        spec = importlib.util.find_spec("ring_flash_attn")
        if spec is None or not spec.submodule_search_locations:
            raise StackUnavailable("ring-flash-attn: not installed (pip install ring-flash-attn==0.1.8)") from None
        package = types.ModuleType("ring_flash_attn")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["ring_flash_attn"] = package
    check_version("ring-flash-attn", "ring-flash-attn", VERSION, ("0.1.8",))
    try:
        import flash_attn  # noqa: F401
        standin = False
    except Exception:  # noqa: BLE001 - any failure: no kernels here
        standin = True
    saved = {name: sys.modules.get(name) for name in ("flash_attn", "flash_attn.flash_attn_interface")}
    if standin:
        outer, interface = types.ModuleType("flash_attn"), types.ModuleType("flash_attn.flash_attn_interface")
        for name in ("_flash_attn_forward", "_flash_attn_backward", "_flash_attn_varlen_forward",
                     "_flash_attn_varlen_backward"):
            setattr(interface, name, _kernel_standin)
        outer.flash_attn_interface = interface
        sys.modules.update({"flash_attn": outer, "flash_attn.flash_attn_interface": interface})
    try:
        utils = importlib.import_module("ring_flash_attn.utils")
        llama3 = importlib.import_module("ring_flash_attn.llama3_flash_attn_varlen")
        zigzag = importlib.import_module("ring_flash_attn.zigzag_ring_flash_attn_varlen")
    finally:
        if standin:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
    return package, utils, llama3, zigzag


LOADED_AS: list = []  # why the package was not imported whole, if it was not
_package, _utils, _llama3, _zigzag = load()
update_out_and_lse = _utils.update_out_and_lse


def kernels():
    """What runs flash-attn's two varlen entry points in ``cp_attention``: (name, device, forward,
    backward); forward None where they are flash-attn's own (nothing swapped), name None where
    no kernel runs here. Asked at each run (a test registers a CPU kernel after importing this)."""
    if "flash_attn.flash_attn_interface" in getattr(_zigzag._flash_attn_varlen_forward, "__module__", ""):
        return "flash-attn", "cuda", None, None
    for device in ("cuda", "cpu"):  # a CPU kernel only where one was registered (the tests' stand-in)
        if _flash_varlen.has_kernel(device):
            return f"torch's FlashAttention-2 (aten::_flash_attention_forward / _backward, {device})", device, \
                *_flash_varlen.torch_flash()
    return None, None, None, None


# FA2's inputs, which the package's code assumes (fp32 never reaches FA2: in it, the backward's
# ``dq = dq_buffer.to(torch.float32)`` is the buffer itself, which the next step's kernel overwrites).
KERNEL_DOMAIN = {"dtypes": ("fp16", "bf16"), "head_dims": (8, 16, 32, 64, 128, 256)}


class _RankGroup:
    """The ``process_group`` a rank's call is given: its rank, the world and the thread hub; the
    package's comms are built from it (one channel each, numbered alike on every rank)."""

    def __init__(self, rank: int, hub: threads.Hub):
        self.rank, self.world, self.hub, self._channels = rank, hub.world, hub, 0

    def channel(self, kind: str) -> str:
        self._channels += 1
        return f"{kind}{self._channels}"


class _ThreadRingComm(_utils.RingComm):
    """The package's RingComm with its transport between rank threads (send_recv, commit, wait; its
    own send_recv_kv): what rank r sends arrives at rank r + 1, as its isend / irecv pair does."""

    def __init__(self, group: _RankGroup):  # not RingComm's: it asks torch.distributed for the rank
        self._group, self._channel = group, group.channel("ring")
        self.rank, self.world_size = group.rank, group.world
        self.send_rank, self.recv_rank = (self.rank + 1) % self.world_size, (self.rank - 1) % self.world_size
        self._calls, self._pending = 0, []

    def send_recv(self, to_send, recv_tensor=None):
        res = torch.empty_like(to_send) if recv_tensor is None else recv_tensor
        self._group.hub.post((self._channel, self._calls, self.send_rank), to_send)
        self._pending.append((res, (self._channel, self._calls, self.rank)))
        self._calls += 1
        return res

    def commit(self):
        pass

    def wait(self):
        for res, key in self._pending:
            res.copy_(self._group.hub.read(key, self.rank))
        self._pending = []


class _ThreadAllGather:
    """AllGatherComm's interface (all_gather into a buffer, wait) between rank threads."""

    def __init__(self, group: _RankGroup):
        self._group, self._pending = group, []

    def all_gather(self, output_tensor, input_tensor):
        channel = self._group.channel("all_gather")
        self._group.hub.post((channel, self._group.rank), input_tensor)
        self._pending.append((output_tensor, channel))

    def wait(self):
        for output, channel in self._pending:
            parts = [self._group.hub.read((channel, r), self._group.rank) for r in range(self._group.world)]
            output.copy_(torch.cat(parts, dim=0))
        self._pending = []


class _ThreadDist:
    """The two torch.distributed calls llama3_flash_attn_varlen makes, between rank threads."""

    @staticmethod
    def get_world_size(group):
        return group.world

    @staticmethod
    def reduce_scatter_tensor(output, input, group=None):  # noqa: A002 - torch's parameter name
        output.copy_(group.hub.reduce_scatter(group.rank, group.channel("reduce_scatter"), input,
                                              lambda value, world: value.chunk(world, dim=0)))


_RUN_LOCK = threading.Lock()
_RANK = threading.local()  # the rank a thread runs, for the recorder


@contextlib.contextmanager
def _on_threads(module, record=None, **swaps):
    """The package module's globals swapped for a run on rank threads: the kernels (unless
    flash-attn's own are there) and the given transport; yields the kernels' device."""
    name, device, forward, backward = kernels()
    if name is None:
        raise Unsupported(NO_KERNELS)
    if forward is not None:
        swaps |= {"_flash_attn_varlen_forward": forward, "_flash_attn_varlen_backward": backward}
    if record is not None:  # each forward kernel call's (cu_seqlens_q, out, lse), by the calling rank
        kernel = swaps.get("_flash_attn_varlen_forward", module._flash_attn_varlen_forward)

        def recorded(**kw):
            result = kernel(**kw)
            # Copies: the package merges into the first block's out in place.
            record.setdefault(_RANK.value, []).append((kw["cu_seqlens_q"], result[0].clone(), result[1].clone()))
            return result

        # The package calls the kernel by keyword; with no defaults to read off (get_default_args),
        # it passes what it sets and the kernel's own defaults hold for the rest.
        swaps["_flash_attn_varlen_forward"] = recorded
    with _RUN_LOCK:
        saved = {name: getattr(module, name) for name in swaps}
        for name, value in swaps.items():
            setattr(module, name, value)
        try:
            yield device
        finally:
            for name, value in saved.items():
                setattr(module, name, value)


def _rank_tensors(problem, inputs, tokens: np.ndarray, device: str) -> dict:
    """q, k, v (and do) of one row's ``tokens`` [L], as [L, heads, d] tensors of the problem's dtype."""
    dtype = framework_dtypes(torch)[problem.dtype]
    names = ("q", "k", "v") + (("do",) if problem.backward else ())
    return {n: torch.tensor(np.asarray(getattr(inputs, n))[0, tokens], dtype=dtype, device=device) for n in names}


def _forward_once(backend, layout, problem, inputs, run):
    """``run()`` once per draw: a property asks every (rank, step) of one draw in turn, and one
    forward run answers them all (kept on the backend until the next draw)."""
    key = hashlib.sha1(pickle.dumps((vars(layout), rows_of(problem), problem.dtype, problem.scale,
                                     np.asarray(inputs.q), np.asarray(inputs.k), np.asarray(inputs.v)))).digest()
    if getattr(backend, "_forward", (None,))[0] != key:
        backend._forward = (key, run())
    return backend._forward[1]


def _local_cu_seqlens(ids_row: np.ndarray, cp: int, device: str) -> torch.Tensor:
    """The local ``cu_seqlens`` the zigzag function is given, as its tests pass them: the row's
    ``cu_seqlens // world_size``."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    return torch.tensor([0, *cut.tolist(), len(ids_row)], dtype=torch.int32, device=device) // cp


def _rank_major(parts: list, problem) -> dict:
    """Each rank's {o [L, H, D], lse [H, L], dq, dk, dv} as the contract's rank-major outputs."""
    cat = lambda name, axis: np.concatenate([p[name].double().cpu().numpy() for p in parts], axis=axis)[None]  # noqa: E731
    lse = cat("lse", 1)
    out = {"o": cat("o", 0), "lse": np.where(np.isposinf(lse), -np.inf, lse)}  # FA2's +inf: no key
    if problem.backward:
        out |= {name: cat(name, 0) for name in ("dq", "dk", "dv")}
    return out


def prepare_cu_seqlens(ids_row: np.ndarray, causal: bool, rank: int, cp: int):
    """``llama3_flash_attn_prepare_cu_seqlens`` on the ``cu_seqlens`` [S+1] int32 of one packed row."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    cu = torch.tensor([0, *cut.tolist(), len(ids_row)], dtype=torch.int32)
    return _llama3.llama3_flash_attn_prepare_cu_seqlens(cu, causal, rank, cp)


class Llama3:
    """llama3_flash_attn_varlen_func's context parallelism: a contiguous split, the K/V all-gathered."""

    name, version = "ring-flash-attn-llama3", VERSION
    domain = cp_domain(cp_strategies=("all_gather",), cp_balances=("contiguous",), cp_sizes=(1, 2, 3, 4, 8),
                       self_attention_only=True, no_padding=True, max_rows=1, extra_dims=False, windows=False,
                       **KERNEL_DOMAIN)

    def validate_cp_layout(self, layout, problem):
        """The package's own check: ``llama3_flash_attn_prepare_cu_seqlens`` asserts that the stream's
        length is a multiple of world_size (``cp_not_divisible``); a malformed layout is cp_bad_layout."""
        check_layout_alone(layout)
        ids, _ = rows_of(problem)
        try:
            prepare_cu_seqlens(ids[0], True, 0, int(layout.cp))
        except AssertionError:
            raise AttnOracleError("cp_not_divisible", f"ring-flash-attn: llama3_flash_attn_prepare_cu_seqlens asserts "
                                  f"total_length % world_size == 0 (T = {ids.shape[1]}, cp = {layout.cp})") from None

    def cp_permutation(self, layout, problem):
        """The README's split, ``torch.chunk(x, world_size, dim=1)[rank]``, rank after rank."""
        ids, _ = rows_of(problem)
        index = torch.arange(ids.shape[1]).expand(ids.shape)
        return torch.cat(torch.chunk(index, int(layout.cp), dim=1), dim=1).numpy().astype(np.int64)

    def key_starts(self, cu_k: np.ndarray, k_slice: slice) -> np.ndarray:
        """Each sequence's first key in the gathered K/V (the row): cu_seqlens_k counts from local_k_slice's start."""
        return k_slice.start + cu_k[:-1]

    def cp_rank_metadata(self, layout, problem, rank, step):
        self.validate_cp_layout(layout, problem)
        ids, _ = rows_of(problem)
        cu_q, cu_k, max_q, max_k, k_slice = prepare_cu_seqlens(ids[0], is_causal(problem.batch.mask), int(rank),
                                                               int(layout.cp))
        cu_q, cu_k = cu_q.numpy().astype(np.int64), cu_k.numpy().astype(np.int64)
        q_spans = packing.spans_from_cu_seqlens(cu_q)
        kv_spans = packing.spans_from_cu_seqlens(cu_k, self.key_starts(cu_k, k_slice))
        batch = rank_batch(layout, problem, self.cp_permutation(layout, problem), int(rank), int(step))
        md = packing.metadata_from_spans(batch, q_spans, kv_spans)
        out = {k: md[k] for k in ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets")}
        # The prefix sums and maxima as the package gave them; the starts from local_k_slice.
        return out | {"cu_seqlens_q": cu_q, "cu_seqlens_kv": cu_k, "ragged_offsets_q": md["ragged_offsets_q"],
                      "ragged_offsets_kv": md["ragged_offsets_kv"], "max_seqlen_q": int(max_q),
                      "max_seqlen_kv": int(max_k)}

    def cp_attention(self, layout, problem, inputs):
        """Every rank's ``llama3_flash_attn_varlen_func`` (heads_k_stride 1, its AllGatherComm and
        reduce-scatter between rank threads) and, with backward, the package's
        ``llama3_flash_attn_varlen_backward`` on the forward's out and lse; rank-major."""
        self.validate_cp_layout(layout, problem)
        ids, _ = rows_of(problem)
        cp, causal, perm = int(layout.cp), is_causal(problem.batch.mask), self.cp_permutation(layout, problem)
        local = ids.shape[1] // cp

        def rank_run(rank, hub):
            x = _rank_tensors(problem, inputs, perm[0, rank * local:(rank + 1) * local], device)
            group = _RankGroup(rank, hub)
            cu_q, cu_k, max_q, max_k, k_slice = prepare_cu_seqlens(ids[0], causal, rank, cp)
            cu_q, cu_k = cu_q.to(device), cu_k.to(device)
            args = (cu_q, cu_k, max_q, max_k, 1, k_slice)
            o, lse, _ = _llama3.llama3_flash_attn_varlen_func(
                x["q"], x["k"], x["v"], *args, softmax_scale=problem.effective_scale, causal=causal,
                return_attn_probs=True, group=group)
            part = {"o": o, "lse": lse}
            if problem.backward:
                part |= dict(zip(("dq", "dk", "dv"), _llama3.llama3_flash_attn_varlen_backward(
                    group, x["do"], x["q"], x["k"], x["v"], o, lse, *args, problem.effective_scale, causal=causal)))
            return part

        with _on_threads(_llama3, Comm=_ThreadAllGather, dist=_ThreadDist) as device:
            return _rank_major(threads.run_ranks(cp, rank_run), problem)

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        """All-gather has one step: the rank's share of :meth:`cp_attention`'s forward."""
        forward = dataclasses.replace(problem, backward=False)
        whole = _forward_once(self, layout, forward, inputs, lambda: self.cp_attention(layout, forward, inputs))
        local = whole["o"].shape[1] // int(layout.cp)
        return {"o": whole["o"][:, rank * local:(rank + 1) * local],
                "lse": whole["lse"][:, :, rank * local:(rank + 1) * local]}

    def cp_merge(self, o, lse, o_part, lse_part):
        """Two partial results of the same queries over disjoint keys merged by ``update_out_and_lse``:
        o [rows, tokens, heads, d], lse [rows, heads, tokens] (the contract's merge_by_lse)."""
        rows, tokens, heads, d = np.shape(o)
        flat_o = lambda a: torch.from_numpy(np.ascontiguousarray(np.reshape(a, (rows * tokens, heads, d))))  # noqa: E731
        flat_lse = lambda a: torch.from_numpy(  # noqa: E731 - [rows, heads, tokens] -> FA's [heads, rows * tokens]
            np.ascontiguousarray(np.transpose(np.asarray(lse if a is None else a), (1, 0, 2)).reshape(heads, -1)))
        out, merged = update_out_and_lse(None, None, flat_o(o), flat_lse(lse))
        out, merged = update_out_and_lse(out, merged, flat_o(o_part), flat_lse(lse_part))
        out = out.double().numpy().reshape(rows, tokens, heads, d)
        merged = merged.double().numpy()[..., 0].reshape(rows, tokens, heads).transpose(0, 2, 1)
        # A running part that attends nothing (lse -inf): the package's lse is NaN (its o is right), the
        # contract's is the other part's; neither part: the contract's o = 0, lse = -inf.
        first, second = np.isneginf(np.asarray(lse)), np.isneginf(np.asarray(lse_part))
        merged = np.where(first & ~second, np.asarray(lse_part), merged)
        merged = np.where(first & second, -np.inf, merged)
        out = np.where((first & second).transpose(0, 2, 1)[..., None], 0.0, out)
        return out, merged


class _LoopbackComm(_utils.RingComm):
    """RingComm (its rank and size from the process group) whose send_recv hands back what it sends:
    every rank's keys here are its local slot numbers, the same on each rank, so what arrives at
    step s is what rank (rank - s) mod cp would send (RingComm receives from rank - 1)."""

    def send_recv(self, to_send, recv_tensor=None):
        return to_send.clone()

    def commit(self):
        pass

    def wait(self):
        pass


def zigzag_kernel_calls(ids_row: np.ndarray, cp: int, rank: int) -> list[dict]:
    """Every kernel call ``zigzag_ring_flash_attn_varlen_func`` makes on rank ``rank``, step by step:
    the local slots of its queries and of its keys, ``cu_seqlens_q`` / ``cu_seqlens_k`` and
    ``causal``. The package runs as it is, with the local cu_seqlens its tests pass
    (``cu_seqlens // world_size``); only the kernel (a recorder) and the ring's transport
    (_LoopbackComm) are stood in, under a fake process group of ``cp`` ranks."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    cu = torch.tensor([0, *cut.tolist(), len(ids_row)], dtype=torch.int32)
    local_cu = cu // cp
    slots = torch.arange(len(ids_row) // cp, dtype=torch.float32).reshape(-1, 1, 1)  # [L, heads 1, dim 1]
    calls = []

    def kernel(**kw):
        calls.append({"q": kw["q"][:, 0, 0].long().numpy(), "k": kw["k"][:, 0, 0].long().numpy(),
                      "cu_seqlens_q": kw["cu_seqlens_q"].numpy().astype(np.int64),
                      "cu_seqlens_k": kw["cu_seqlens_k"].numpy().astype(np.int64), "causal": bool(kw["causal"])})
        n = kw["q"].shape[0]
        return torch.zeros_like(kw["q"]), torch.zeros(kw["q"].shape[1], n, dtype=torch.float32), None, None

    with _RUN_LOCK, fake_process_group(rank, cp):
        saved = _zigzag._flash_attn_varlen_forward, _zigzag.RingComm
        _zigzag._flash_attn_varlen_forward, _zigzag.RingComm = kernel, _LoopbackComm
        try:
            _zigzag.zigzag_ring_flash_attn_varlen_func(slots, slots, slots, local_cu,
                                                       int((local_cu[1:] - local_cu[:-1]).max()), causal=True)
        finally:
            _zigzag._flash_attn_varlen_forward, _zigzag.RingComm = saved
    return calls


class Zigzag:
    """zigzag_ring_flash_attn_varlen_func's ring: each document in 2*cp chunks, rank r holding chunks
    r and 2*cp-1-r; the kernel call of each ring step, recorded."""

    name, version = "ring-flash-attn-zigzag-varlen", VERSION
    domain = cp_domain(cp_strategies=("ring",), cp_balances=("head_tail",), cp_sizes=(1, 2, 3, 4, 8),
                       self_attention_only=True, no_padding=True, max_rows=1, extra_dims=False, windows=False,
                       mask_kinds=CAUSAL_KINDS, **KERNEL_DOMAIN)

    def validate_cp_layout(self, layout, problem):
        """The package checks nothing of the layout (its tests assert cu_seqlens % (2 * world_size) == 0
        before they call it; the function divides the cu_seqlens it is given): accepted, as it does;
        a malformed layout (cp < 1, indices for another balance) is cp_bad_layout."""
        check_layout_alone(layout)

    def cp_permutation(self, layout, problem):
        """The package's tests' split (``extract_local``): each document's tokens chunked in 2*cp,
        rank r taking chunks r and 2*cp-1-r, documents in order; ranks one after the other."""
        ids, _ = rows_of(problem)
        cp, row = int(layout.cp), ids[0]
        cut = np.flatnonzero(np.diff(row)) + 1
        bounds = [0, *cut.tolist(), len(row)]
        ranks = [[] for _ in range(cp)]
        for a, b in zip(bounds, bounds[1:]):
            chunks = torch.arange(a, b).chunk(2 * cp)
            for r in range(cp):
                ranks[r] += [chunks[r], chunks[2 * cp - 1 - r]]
        return torch.cat([torch.cat(parts) for parts in ranks]).numpy().astype(np.int64)[None]

    def cp_rank_metadata(self, layout, problem, rank, step):
        self.validate_cp_layout(layout, problem)
        ids, _ = rows_of(problem)
        call = zigzag_kernel_calls(ids[0], int(layout.cp), int(rank))[int(step)]
        # Sequence j of the call: its queries' local slots from q[cu_q[j]], its keys' from k[cu_k[j]]
        # (the source rank's local order, the contract's ring kv side).
        spans = {side: [(int(call[side][cu[j]]) if cu[j] < len(call[side]) else 0, int(cu[j + 1] - cu[j]))
                        for j in range(len(cu) - 1)]
                 for side, cu in (("q", call["cu_seqlens_q"]), ("k", call["cu_seqlens_k"]))}
        batch = rank_batch(layout, problem, self.cp_permutation(layout, problem), int(rank), int(step))
        md = packing.metadata_from_spans(batch, spans["q"], spans["k"])
        return {k: md[k] for k in ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets", "cu_seqlens_q",
                                   "cu_seqlens_kv", "ragged_offsets_q", "ragged_offsets_kv")}

    def _run(self, layout, problem, inputs, record=None) -> dict:
        """Every rank's ``zigzag_ring_flash_attn_varlen_func`` (its RingComm between rank threads) and,
        with backward, the package's ``zigzag_ring_flash_attn_varlen_backward`` on the forward's out
        and lse, as its autograd Function calls it; rank-major."""
        self.validate_cp_layout(layout, problem)
        ids, _ = rows_of(problem)
        cp, perm = int(layout.cp), self.cp_permutation(layout, problem)
        local = ids.shape[1] // cp

        def rank_run(rank, hub):
            _RANK.value = rank
            x = _rank_tensors(problem, inputs, perm[0, rank * local:(rank + 1) * local], device)
            group, local_cu = _RankGroup(rank, hub), _local_cu_seqlens(ids[0], cp, device)
            max_seqlen = int((local_cu[1:] - local_cu[:-1]).max())
            o, lse, _ = _zigzag.zigzag_ring_flash_attn_varlen_func(
                x["q"], x["k"], x["v"], local_cu, max_seqlen, softmax_scale=problem.effective_scale, causal=True,
                return_attn_probs=True, group=group)
            part = {"o": o, "lse": lse}
            if problem.backward:
                halves = [_zigzag.get_half_index(local_cu, front=front) for front in (True, False)]
                part |= dict(zip(("dq", "dk", "dv"), _zigzag.zigzag_ring_flash_attn_varlen_backward(
                    group, x["do"], x["q"], x["k"], x["v"], o, lse, local_cu, max_seqlen, *halves,
                    softmax_scale=problem.effective_scale, causal=True)))
            return part

        with _on_threads(_zigzag, record=record, RingComm=self.ring_comm) as device:
            return _rank_major(threads.run_ranks(cp, rank_run), problem)

    ring_comm = _ThreadRingComm  # the ring's transport between rank threads (a planted twin turns it)

    def cp_attention(self, layout, problem, inputs):
        return self._run(layout, problem, inputs)

    def cp_rank_attention(self, layout, problem, inputs, rank, step):
        """Step ``step``'s kernel call on rank ``rank`` in the forward ring: its queries (every local
        query, or the back halves once the source rank is above this one) against the block it got;
        the queries the call leaves out attend nothing at that step (o 0, lse -inf)."""
        forward = dataclasses.replace(problem, backward=False)

        def record_every_call():
            record: dict = {}
            self._run(layout, forward, inputs, record)
            return record

        cu, o, lse = _forward_once(self, layout, forward, inputs, record_every_call)[int(rank)][int(step)]
        if lse.dim() == 3:  # the padded lse [sequences, heads, max] of older kernels
            lse = _utils.flatten_varlen_lse(lse, cu_seqlens=cu)
        local = np.shape(inputs.q)[1] // int(layout.cp)
        rows = torch.arange(local, device=lse.device)
        if o.shape[0] != local:  # the back halves, as the ring takes them (get_half_index of the local cu_seqlens)
            local_cu = _local_cu_seqlens(rows_of(problem)[0][0], int(layout.cp), str(lse.device))
            rows = rows[_zigzag.get_half_index(local_cu, front=False)]
        out = torch.zeros((local, *o.shape[1:]), dtype=torch.float64, device=lse.device)
        full = torch.full((lse.shape[0], local), -np.inf, dtype=torch.float64, device=lse.device)
        out[rows], full[:, rows] = o.double(), lse.double()
        return _rank_major([{"o": out, "lse": full}], dataclasses.replace(problem, backward=False))


if kernels()[0] is None:  # no kernel runs here: not served, and the suite skips those properties (NO_KERNELS)
    for _cls in (Llama3, Zigzag):
        del _cls.cp_attention, _cls.cp_rank_attention
