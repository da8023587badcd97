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

Not served (shown by python/tests/test_stack_ring_flash_attn_cp.py against the package):
``cp_attention`` and ``cp_rank_attention`` of both classes: the kernels are flash-attn's, which
needs a CUDA GPU (``import flash_attn`` fails here). The classes do not define them, and the suite
skips the properties that call them, with that reason.

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

import importlib
import importlib.util
import sys
import types

import numpy as np

from attn_oracle import packing
from attn_oracle.domain import CAUSAL_KINDS, is_causal
from attn_oracle.errors import AttnOracleError
from attn_oracle.stacks import StackUnavailable, check_version, installed_version, require
import threading

from attn_oracle.stacks._cp_common import check_layout_alone, cp_domain, fake_process_group, rank_batch, rows_of

torch = require("ring-flash-attn", "torch", "torch", checked=("2.15",))

__all__ = ["Llama3", "Zigzag", "NO_KERNELS", "load", "prepare_cu_seqlens", "zigzag_kernel_calls"]

VERSION = installed_version("ring-flash-attn")
NO_KERNELS = ("ring-flash-attn's attention is flash-attn's CUDA varlen kernels (flash_attn.flash_attn_interface."
              "_flash_attn_varlen_forward), which need a CUDA GPU; flash_attn does not import here")


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


def prepare_cu_seqlens(ids_row: np.ndarray, causal: bool, rank: int, cp: int):
    """``llama3_flash_attn_prepare_cu_seqlens`` on the ``cu_seqlens`` [S+1] int32 of one packed row."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    cu = torch.tensor([0, *cut.tolist(), len(ids_row)], dtype=torch.int32)
    return _llama3.llama3_flash_attn_prepare_cu_seqlens(cu, causal, rank, cp)


class Llama3:
    """llama3_flash_attn_varlen_func's context parallelism: a contiguous split, the K/V all-gathered."""

    name, version = "ring-flash-attn-llama3", VERSION
    domain = cp_domain(cp_strategies=("all_gather",), cp_balances=("contiguous",), cp_sizes=(1, 2, 3, 4, 8),
                       self_attention_only=True, no_padding=True, max_rows=1, extra_dims=False, windows=False)

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


_ZIGZAG_LOCK = threading.Lock()


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

    with _ZIGZAG_LOCK, fake_process_group(rank, cp):
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
                       mask_kinds=CAUSAL_KINDS)

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
