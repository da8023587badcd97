"""TransformerEngine JAX's context parallelism over packed (THD) sequences: its load-balancing
reorder and the per-rank metadata its all-gather and ring paths hand the fused kernel.

What runs is TE's own Python, from the public call down to the kernel:
``reorder_causal_load_balancing(ids / positions / q, k, v)`` as a user reorders a
batch, then ``fused_attn(..., SequenceDescriptor.from_segment_ids_and_pos(...),
context_parallel_strategy=..., context_parallel_causal_load_balanced=True,
context_parallel_axis="cp", stripe_size=...)``. ``fused_attn_fwd`` picks the
primitive as TE does (THD: ``FusedAttnCPStripedWithAllGatherFwdPrimitive`` for all-gather,
``FusedRingAttnStripedFwdPrimitive`` for the ring); where JAX's custom partitioning
would call the primitive's ``partition``, the module calls it and runs the ``impl``
it returns under ``jax.shard_map`` over a mesh of ``cp`` CPU devices, every input
sharded along its sequence dim over the axis "cp" (TE's own collectives run: the
all-gather of K/V and of the kv segment ids and positions, with TE's inverse
reorder; the ring's ``ppermute`` of K/V, ids and positions). Inside, TE computes each
rank's seqlens and offsets (all-gather: ``q_seqlens_for_striped_for_rank``,
``q_seqoffsets_for_striped_for_rank``, ``kv_seqlens_for_striped_for_rank``,
``kv_seqoffsets_for_striped_for_rank``; ring: ``SequenceDescriptor`` on the local q
and the kv block of that step) and ``FusedAttnFwdPrimitive.impl`` compacts them into
the cu_seqlens and ragged offsets it binds to cuDNN's kernel. That bind is replaced by
a stub that records, per rank (``lax.axis_index``) and ring step, what it was handed,
and returns zeros. Not served: ``cp_rank_attention`` and ``cp_attention`` (TE's fused attention
is cuDNN's kernel, transformer-engine-jax's custom call, CUDA only); the classes do not define
them, and the suite skips the properties that call them, with that reason.

Loading: always a private copy of TE's files (``transformer_engine/jax/attention.py``,
``sharding.py``, ``cpp_extensions/attention.py``, the pure-Python wheel's), with
``transformer_engine_jax`` stood in by enum names (as te_jax.py does), the
primitive registration by a no-op and ``misc`` by its ``get_padded_spec`` alone; so
the primitives' ``inner_primitive`` / ``outer_primitive`` set here never touch a real
TE in the same process. ``ATTN_ORACLE_TE_JAX_ATTENTION`` names another attention.py
(its ``cpp_extensions/`` and ``sharding.py`` beside it when present).

Classes (TE offers THD context parallelism as these pairs; its ReorderStrategy names them):

- ``Striped``: ``ReorderStrategy.Striped`` with ``CPStrategy.ALL_GATHER``, any
  ``stripe_size`` (TE's tests: 64, 128; fused_attn's docstring: "stripe_size > 1 is only
  supported for CP + THD + Striped + AG").
- ``StripedRing``: ``ReorderStrategy.Striped`` with ``CPStrategy.RING``, stripe 1
  (fused_attn's docstring: "stripe_size=1 is supported for both ... AG and ... P2P(Ring)";
  TE's ring test sets stripe_size=1 for THD).
- ``DualChunkSwap``: ``ReorderStrategy.DualChunkSwap`` with ``CPStrategy.RING`` (TE's
  THD ring primitive takes any reordered ids and positions; its all-gather refuses).

Methods and what each calls:

- ``cp_permutation``: ``reorder_causal_load_balancing`` on a [B, T] int32 arange
  (seq_dim 1; Striped with ``stripe_size = layout.stripe``, DualChunkSwap with None):
  slot s of the result holds row token perm[s], rank r holding slots [r*L, (r+1)*L)
  (the seq dim is split in cp equal shards). TE's ValueError for a length that does
  not split is the suite's ``cp_not_divisible``.
- ``cp_reorder``: ``reorder_causal_load_balancing`` / ``inverse_reorder_causal_load_balancing``
  on an int32 index tensor of the values' shape [B, T, W] (seq_dim 1), the float64
  values then taken at those indices (exact; JAX without x64 would hold them in float32).
- ``cp_rank_metadata``: the run above, read off the stub's record for (rank, step).
- ``kernel_calls``: every rank's and step's record, for tests and reports.

Conventions mapped (input side):

- Mask: TE's THD context parallelism takes ``PADDING_CAUSAL_MASK`` alone
  (``_FusedAttnCPWithAllGatherHelper.check_supported``: "only supports PADDING_CAUSAL_MASK
  for THD types"; the ring helper likewise). Every causal kind goes to TE as
  ``PADDING_CAUSAL_MASK``: on self-attention the four causal kinds are one token-level
  mask (docs/semantics.md#2-the-attention-mask; the rank problem writes bottom-right top-left),
  and a batch without padding is a padding_causal batch without padding.
- Segment ids: TE's k-th document of a row is id k (from_segment_ids_and_pos'
  examples, its tests' ``generate_random_segment_ids_and_pos``); the all-gather path
  reads the gathered start of id k as the k-th position break of the gathered row
  (``kv_seqoffsets_for_striped_for_rank``: ``sca_row[si_row - 1]``). Ids go to TE as each
  row's document ordinals; the metadata is slotted by the batch's own ids.
- Positions: TE's are "the position inside each segment" (from_segment_ids_and_pos), and it
  reads them as such: a document's keys in the gathered row are its first token up to
  the last position + 1 (``kv_seqlens_for_striped_for_rank``), and the all-gather helpers
  split a rank's tokens into runs where a position is not the previous one plus 1, padding
  included. Its convention numbers each segment's tokens, padding after a document
  included, from 0 (from_segment_ids_and_pos' example ``[0, 1, 2, 3, 4]`` for
  ``[3, 3, 3, 0, 0]``; its test generator's ``arange(segment_size)``). Ours may start
  anywhere and skip (docs/semantics.md#1-inputs), and padding positions carry nothing;
  under the causal kinds a document's mask depends on the order of its positions only, and
  the metadata never reads the window, so every token goes to TE at its offset in its span
  (the document with the padding after it, or a row's leading padding alone: the head_tail
  spans). Documents at 0, 1, 2, ... go as they are.
- Window: causal kinds only, so the right side is moot; (-1, -1) and a negative left
  go to TE as ``window_size=None``, else ``(left, 0)``. TE's metadata never reads it
  (the all-gather helpers take none; the ring's descriptor uses it for its fast-path
  choice only, which the ring turns off).

Conventions mapped (output side, TE's kernel arguments to docs/semantics.md#3-metadata
of the rank problem, model/context_parallel.hpp):

- Buffers: q offsets index the rank's local [B, L] q (``row * L + local slot``, as
  ``convert_to_2d`` writes them with the local q length); kv offsets index the K
  buffer the kernel is given: all-gather, the gathered row in row order (TE
  all-gathers and inverse-reorders K/V and the kv ids and positions), ``row * T + t``;
  ring step s, the block received from rank (r - s) mod cp in that rank's local order
  (TE's ppermute sends rank i's block to i + 1 each step), ``row * L + slot``. Both are
  the rank problem's kv side, so the offsets are ours as they are; the buffer lengths
  are read off the stub's q and k shapes.
- Padding of TE's arrays: cu_seqlens run over every (row, slot) with the totals
  repeated past the last segment, ragged offsets are filled with ``B * L`` (q) or
  ``B * Lkv`` (kv) past it. Segment k is read as the kernel reads it:
  ``q[q_offsets[k] : + cu_q[k+1] - cu_q[k]]`` against ``k[kv_offsets[k] : + cu_kv[k+1] -
  cu_kv[k]]``, every k with a token on either side.
- Segments to documents: a segment is the document of its first query token (the
  rank's own ids). The ring's segments are documents already (the descriptor's
  per-segment-id seqlens). The all-gather's are runs (each stripe of a document on that
  rank is a segment, its keys the document's gathered tokens up to that stripe's last
  position, bottom-right causal): a document's q tokens are the union of its runs'
  queries and its kv tokens the union of their keys. The fields then follow docs/semantics.md#3-metadata
  from those token sets: seqlens slotted by id, offsets the first token of each
  document in row order, cu_seqlens and ragged offsets over the documents in row
  order, plus ``indices_q`` / ``indices_kv`` (every token a segment hands the kernel,
  ``row * L + t``, so that a token handed twice, not at all, or past the buffer shows).
  Each token a segment hands the kernel counts as valid (TE's segments are the tokens
  it means the kernel to use).

Declined input classes (what TE refuses, each tried against TE by
python/tests/test_stack_te_jax_cp.py), said by each class's domain so draws land inside:

- mask kinds without a causal term: ``check_supported`` of both THD paths raises;
- DualChunkSwap with all-gather: ``check_supported`` raises ("only supports Dual Chunk
  load balancing with BSHD layouts and Striped load balancing with THD layouts");
- DualChunkSwap with an odd cp: ``reorder_causal_dual_chunk_swap`` raises ("must be a
  multiple of 2");
- StripedRing with a stripe over 1: fused_attn's docstring says the ring takes stripe 1
  only; TE runs it without a word, and the test shows why it is not offered: the
  ring's top-left kernel mask on striped runs is not causal attention;
- extra dims: context parallelism splits [B, T] rows (the suite's own rule too);
- ``cp`` above this process's CPU devices (``jax_num_cpu_devices``, set to 8 on import
  unless JAX has started).

Findings (docs/stacks.md): the all-gather path loses the offset of a run that continues the
positions before it on a rank (``q_seqoffsets_for_striped_for_rank`` and
``kv_seqoffsets_for_striped_for_rank`` break on positions alone, the length helpers on ids
too): a bug, docs/findings/te-jax-2.20-cp-all-gather-run-offsets.md; on dual-chunk-swap
blocks or longer stripes the ring's metadata is the contract's but the top-left mask cuDNN
applies to each step's segments is not causal attention (TE documents Striped, stripe 1, for
the THD ring; a limitation, not refused).

Startup loads TE's files once; each new shape compiles TE's partitioned impl once (a
few seconds on this machine), so checks run with ``--shape-stable``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import sys
import types
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np

from . import StackUnavailable, installed_version
from .te_jax import ENV, _Names, _installed_attention, _native_stub, _version_gate
from ..errors import AttnOracleError, Unsupported
from ._cp_common import cp_domain
from attn_oracle.domain import CAUSAL_KINDS

import jax  # noqa: E402 - te_jax's require() imported it (a missing JAX is its one-line message)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

__all__ = ["DualChunkSwap", "Striped", "StripedRing", "load_te", "te_run", "CP_DEVICES"]

CP_DEVICES = 8  # the CPU devices asked for: the largest cp the suite draws
AXIS = "cp"
try:  # before JAX starts its CPU backend; afterwards cp is bounded by the devices there are
    jax.config.update("jax_num_cpu_devices", max(CP_DEVICES, jax.config.jax_num_cpu_devices))
except Exception:  # noqa: BLE001 - JAX has started: unsupported_context_parallel says so per layout
    pass

_PACKAGE = "_attn_oracle_te_jax_cp"
# TE's words (and MaxText's, which copies them) for a row whose length does not split into the
# reorder's chunks (reorder_causal_dual_chunk_swap) or stripes (reorder_causal_striped)
NOT_DIVISIBLE = ("is not a multiple of", "is multiple of cp_size*stripe_size")


# ------------------------------------------------------------------------------------ loading
def _load_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _base_stub() -> types.ModuleType:
    """cpp_extensions.base without JAX's primitive registration (it lowers to the native library)."""
    base = types.ModuleType(_PACKAGE + ".cpp_extensions.base")

    class BasePrimitive:  # the primitives' static methods are all this module calls
        pass

    base.BasePrimitive = BasePrimitive
    base.register_primitive = lambda cls, *args, **kwargs: None
    return base


def _misc_stub(misc_py: Path, sharding) -> types.ModuleType:
    """cpp_extensions.misc: TE's own ``get_padded_spec``, the rest native (never called on this path)."""
    misc = types.ModuleType(_PACKAGE + ".cpp_extensions.misc")
    tree = ast.parse(misc_py.read_text())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_padded_spec"]
    namespace = {"te_get_padded_spec": sharding.get_padded_spec}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(misc_py), "exec"), namespace)  # noqa: S102 - TE's code
    misc.get_padded_spec = namespace["get_padded_spec"]

    def native(name):
        def refuse(*args, **kwargs):
            raise RuntimeError(f"{name} needs TE's native library (not on the metadata path)")
        return refuse

    for name in ("check_valid_batch_dims", "jax_dtype_to_te_dtype", "te_dtype_to_jax_dtype", "get_cudnn_version",
                 "get_all_device_compute_capability"):
        setattr(misc, name, native(name))
    return misc


def _beside(path: Path, relative: str) -> Path:
    here = path.parent / relative
    return here if here.exists() else _installed_attention().parent / relative


def load_te(path: str | None = None):
    """(attention, cpp_extensions.attention, where) as a private package: TE's Python, native pieces stood in."""
    if path:
        attention_py = Path(path)
        if not attention_py.exists():
            raise StackUnavailable(f"TransformerEngine JAX: {ENV}={path} does not exist")
    else:
        _version_gate()
        attention_py = _installed_attention()
    cpp_py, sharding_py = _beside(attention_py, "cpp_extensions/attention.py"), _beside(attention_py, "sharding.py")
    native = _native_stub()
    for name in ("DType", "JAXX_Scaling_Mode", "NVTE_Fused_Attn_Backend"):  # what cpp_extensions imports besides
        setattr(native, name, _Names(name, (), {}))
    borrowed = ("transformer_engine_jax", "transformer_engine.jax.attention")
    saved = {name: sys.modules.get(name) for name in borrowed}
    try:
        sys.modules["transformer_engine_jax"] = native
        package = types.ModuleType(_PACKAGE)
        package.__path__ = [str(attention_py.parent)]
        sys.modules[_PACKAGE] = package
        tex = types.ModuleType(_PACKAGE + ".cpp_extensions")
        tex.__path__ = [str(cpp_py.parent)]
        sys.modules[tex.__name__] = tex
        package.cpp_extensions = tex
        attention = _load_file(_PACKAGE + ".attention", attention_py)
        sharding = _load_file(_PACKAGE + ".sharding", sharding_py)
        sys.modules[_PACKAGE + ".cpp_extensions.base"] = _base_stub()
        sys.modules[_PACKAGE + ".cpp_extensions.misc"] = _misc_stub(cpp_py.parent / "misc.py", sharding)
        # cpp_extensions/attention.py imports TE's enums by their absolute name: this copy's
        sys.modules["transformer_engine.jax.attention"] = attention
        cpp = _load_file(_PACKAGE + ".cpp_extensions.attention", cpp_py)
    except StackUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 - another release's files: one line, as require() says it
        raise StackUnavailable(f"TransformerEngine JAX: cannot load {attention_py.parent} for context parallelism "
                               f"({type(e).__name__}: {e})") from None
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    tex.attention = cpp  # attention.py calls tex.attention.reorder_causal_* and tex.fused_attn_fwd
    for name in cpp.__all__:
        setattr(tex, name, getattr(cpp, name))
    _install_stubs(cpp)
    where = f"{attention_py.parent} {installed_version('transformer-engine') if not path else '(checkout)'}"
    return attention, cpp, where


# ------------------------------------------------------------------------------ the run
_STATE = {"mesh": None, "ring": False, "calls": 0, "static": {}, "records": {}}


@dataclasses.dataclass
class _ArgInfo:  # what custom_partitioning hands partition(): a sharding and an aval's shape and dtype
    sharding: object
    shape: tuple
    dtype: object = None

    @property
    def ndim(self):
        return len(self.shape)


def _fit(spec, ndim: int) -> PartitionSpec:
    """A partition spec of exactly ``ndim`` entries (TE writes the seed's as (mesh axes, None) on a 1-D seed)."""
    spec = tuple(spec)
    return PartitionSpec(*(spec[:ndim] + (None,) * max(0, ndim - len(spec))))


class _Partitioned:
    """A primitive's outer bind as JAX's custom partitioning runs it: TE's ``partition`` on the
    operands' shardings, its impl per shard under shard_map."""

    def __init__(self, cls, ring: bool):
        self.cls, self.ring = cls, ring

    def bind(self, *args, config):
        mesh = _STATE["mesh"]
        specs = []
        for i, a in enumerate(args):  # q, k, v [B, T, ...] and the ids and positions [B, T]: T over the cp axis
            sharded = (i < 3 and a.ndim >= 4) or (i >= 10 and a.ndim == 2)
            specs.append(PartitionSpec(None, config.cp_axis) if sharded else PartitionSpec())
        infos = [_ArgInfo(NamedSharding(mesh, s), a.shape, a.dtype) for s, a in zip(specs, args)]
        out_shardings = self.cls.infer_sharding_from_operands(config, mesh, infos, None)
        results = [_ArgInfo(s, ()) for s in out_shardings]
        results[2] = _ArgInfo(out_shardings[2], (args[5].shape[0], 4), jnp.uint32)  # rng_state (seed rows, 4)
        _STATE["ring"], _STATE["calls"] = self.ring, 0
        _, impl, out_shardings, arg_shardings = self.cls.partition(config, mesh, infos, results)
        in_specs = tuple(_fit(s.spec, a.ndim) for s, a in zip(arg_shardings, args))
        out_specs = tuple(_fit(s.spec, n) for s, n in zip(out_shardings, (4, 4, 2, 1)))
        return jax.shard_map(impl, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*args)


def _record(rank, q_cu, kv_cu, q_off, kv_off, *, step):
    entry = {"q_cu_seqlens": np.asarray(q_cu, np.int64), "kv_cu_seqlens": np.asarray(kv_cu, np.int64),
             "q_offsets": np.asarray(q_off, np.int64).reshape(-1), "kv_offsets": np.asarray(kv_off, np.int64).reshape(-1)}
    entry.update(_STATE["static"][step])
    key = (int(rank), step)
    seen = _STATE["records"].get(key)
    if seen is not None and any(not np.array_equal(seen[k], entry[k]) for k in entry if isinstance(entry[k], np.ndarray)):
        raise RuntimeError(f"rank {key[0]}, step {step}: TE's kernel was handed two different argument sets")
    _STATE["records"][key] = entry


class _Kernel:
    """FusedAttnFwdPrimitive.inner_primitive: records what TE hands cuDNN, returns zeros of its shapes."""

    @staticmethod
    def bind(q, k, v, bias, softmax_offset, seed, q_cu, kv_cu, q_off, kv_off, *segments, config):
        step = _STATE["calls"] if _STATE["ring"] else 0  # the ring's steps are unrolled; all-gather: one call a rank
        _STATE["calls"] += 1
        window = tuple(int(w) for w in config.effective_window_size)
        _STATE["static"][step] = {"mask": config.attn_mask_type.name, "window": window,
                                  "q_tokens": int(q.shape[1]), "kv_tokens": int(k.shape[1])}
        rank = jax.lax.axis_index(config.cp_axis)
        jax.debug.callback(partial(_record, step=step), rank, q_cu, kv_cu, q_off, kv_off)
        b, lq, h, _ = q.shape
        return (jnp.zeros_like(q), jnp.zeros((b, lq, h, 1), jnp.float32), jnp.zeros((0,), jnp.float32),
                jnp.zeros((seed.shape[0], 4), jnp.uint32), jnp.zeros((0,), jnp.float32))


def _install_stubs(cpp) -> None:
    cpp.FusedAttnFwdPrimitive.inner_primitive = _Kernel()
    ring = {"FusedRingAttnStripedFwdPrimitive", "FusedRingAttnFwdPrimitive"}
    for name in ("FusedAttnFwdPrimitive", "FusedAttnCPWithAllGatherFwdPrimitive",
                 "FusedAttnCPStripedWithAllGatherFwdPrimitive", "FusedRingAttnFwdPrimitive",
                 "FusedRingAttnStripedFwdPrimitive"):
        cls = getattr(cpp, name)
        cls.outer_primitive = _Partitioned(cls, name in ring)


_COMPILED: dict = {}


def _cpu_mesh(cp: int) -> Mesh:
    devices = jax.devices("cpu")
    if len(devices) < cp:
        raise Unsupported(f"cp = {cp} needs {cp} CPU devices; this process has {len(devices)} "
                          "(jax_num_cpu_devices is set on import, before JAX starts)")
    return Mesh(np.asarray(devices[:cp]), (AXIS,))


def te_run(te, ids, pos, *, cp: int, strategy: str, reorder: str, stripe, mask: str = "PADDING_CAUSAL_MASK",
           window=None, max_segments: int) -> dict:
    """TE's context-parallel forward on row-order ids and positions [B, T] (TE's conventions already
    applied), as a user calls it: ids, positions and q/k/v reordered by ``reorder_causal_load_balancing``,
    then ``fused_attn``. Returns {(rank, step): what the kernel was handed}; TE's own exceptions pass."""
    attention, _ = te
    ids, pos = np.asarray(ids, np.int32), np.asarray(pos, np.int32)
    key = (id(attention), cp, strategy, reorder, stripe, mask, window, max_segments, ids.shape)
    mesh = _cpu_mesh(cp)
    if key not in _COMPILED:  # (the jitted run, what its trace saw of each kernel call)
        order = getattr(attention.ReorderStrategy, reorder)

        def run(ids, pos):
            def balance(x):
                return attention.reorder_causal_load_balancing(x, order, cp, 1, stripe)

            b, t = ids.shape
            q = balance(jnp.zeros((b, t, 1, 8), jnp.float32))  # heads and values: the metadata reads none
            descriptor = attention.SequenceDescriptor.from_segment_ids_and_pos((balance(ids), balance(ids)),
                                                                               (balance(pos), balance(pos)))
            return attention.fused_attn(
                (q, q, q), None, descriptor, jnp.zeros(2 * cp, jnp.uint32),  # the seed TE makes for cp devices
                attention.AttnBiasType.NO_BIAS, getattr(attention.AttnMaskType, mask), attention.QKVLayout.THD_THD_THD,
                attention.AttnSoftmaxType.VANILLA_SOFTMAX, 1.0, 0.0, True, max_segments, window,
                context_parallel_strategy=getattr(attention.CPStrategy, strategy),
                context_parallel_causal_load_balanced=True, context_parallel_axis=AXIS, stripe_size=stripe)

        _COMPILED[key] = (jax.jit(run), {})
    fn, static = _COMPILED[key]
    _STATE.update(mesh=mesh, records={}, static=static)
    with jax.set_mesh(mesh):
        jax.block_until_ready(fn(ids, pos))
    jax.effects_barrier()
    return dict(_STATE["records"])


# ------------------------------------------------------------------------------ mappings
def te_ids(ids: np.ndarray) -> np.ndarray:
    """Each row's documents numbered 1, 2, ... in row order (TE's k-th document is id k); padding 0."""
    out = np.zeros_like(ids)
    for b, row in enumerate(ids):
        starts = np.flatnonzero((row != 0) & np.r_[True, row[1:] != row[:-1]])
        out[b, starts] = 1
        out[b] = np.where(row != 0, np.cumsum(out[b]), 0)
    return out


def te_positions(ids: np.ndarray) -> np.ndarray:
    """Every token at its offset in its span (a document with the padding after it, or a row's
    leading padding), as TE numbers a segment's tokens: documents at 0, 1, 2, ..., their padding on."""
    ids = np.asarray(ids)
    out = np.zeros(ids.shape, np.int64)
    for b, row in enumerate(ids):
        start = 0  # the span's first token: a row's leading padding starts one at 0
        for t in range(len(row)):
            if row[t] != 0 and (t == 0 or row[t] != row[t - 1]):
                start = t
            out[b, t] = t - start
    return out


def metadata_from_call(call: dict, q_ids: np.ndarray, max_segments: int) -> dict:
    """docs/semantics.md#3-metadata fields of the tokens one recorded kernel call hands cuDNN.
    ``q_ids`` [B, L]: the rank's own ids in local order (a segment's document is its first query's)."""
    rows, lq, lkv = q_ids.shape[0], call["q_tokens"], call["kv_tokens"]
    q_len, kv_len = np.diff(call["q_cu_seqlens"]), np.diff(call["kv_cu_seqlens"])
    n = max(len(q_len), len(kv_len))
    q_len, kv_len = np.pad(q_len, (0, n - len(q_len))), np.pad(kv_len, (0, n - len(kv_len)))
    q_off = np.pad(call["q_offsets"], (0, max(0, n - len(call["q_offsets"]))), constant_values=rows * lq)
    kv_off = np.pad(call["kv_offsets"], (0, max(0, n - len(call["kv_offsets"]))), constant_values=rows * lkv)
    q_sets, kv_sets = defaultdict(list), defaultdict(list)
    for k in range(n):
        if q_len[k] <= 0 and kv_len[k] <= 0:
            continue
        first = int(q_off[k])
        b = first // lq
        doc = int(q_ids[b, first % lq]) if 0 <= first < rows * lq else 0
        q_sets[(b, doc)].extend(range(first, first + max(int(q_len[k]), 0)))
        kv_sets[(b, doc)].extend(range(int(kv_off[k]), int(kv_off[k]) + max(int(kv_len[k]), 0)))
    # a document's queries: its runs' (a query handed twice shows twice in indices_q); its keys: the
    # union of its runs' (the all-gather's runs share their document's first keys)
    docs = sorted(q_sets, key=lambda key: (key[0], min(q_sets[key], default=rows * lq)))
    out = {"q_seqlens": np.zeros((rows, max_segments), np.int64), "kv_seqlens": np.zeros((rows, max_segments), np.int64),
           "q_offsets": np.full((rows, max_segments + 1), -1, np.int64),
           "kv_offsets": np.full((rows, max_segments + 1), -1, np.int64)}
    seen = defaultdict(int)
    cu_q, cu_kv, ragged_q, ragged_kv, indices_q, indices_kv = [0], [0], [], [], [], []
    for b, doc in docs:
        qs, ks = sorted(set(q_sets[(b, doc)])), sorted(set(kv_sets[(b, doc)]))
        indices_q += sorted(q_sets[(b, doc)])
        indices_kv += ks
        if 1 <= doc <= max_segments and b < rows:
            out["q_seqlens"][b, doc - 1] += len(qs)
            out["kv_seqlens"][b, doc - 1] += len(ks)
            i = seen[b]
            seen[b] += 1
            if i <= max_segments:
                out["q_offsets"][b, i] = qs[0] - b * lq if qs else -1
                out["kv_offsets"][b, i] = ks[0] % lkv if ks else -1
        cu_q.append(cu_q[-1] + len(qs))
        cu_kv.append(cu_kv[-1] + len(ks))
        ragged_q.append(qs[0] if qs else rows * lq)
        ragged_kv.append(ks[0] if ks else rows * lkv)
    out.update(cu_seqlens_q=np.asarray(cu_q, np.int64), cu_seqlens_kv=np.asarray(cu_kv, np.int64),
               ragged_offsets_q=np.asarray(ragged_q + [rows * lq], np.int64),
               ragged_offsets_kv=np.asarray(ragged_kv + [rows * lkv], np.int64),
               indices_q=np.asarray(indices_q, np.int64), indices_kv=np.asarray(indices_kv, np.int64))
    return out


# ------------------------------------------------------------------------------ the backends
_TE = None


def _te():
    global _TE
    if _TE is None:
        _TE = load_te(os.environ.get(ENV) or None)
    return _TE


_NOT_CAUSAL = ("TE's THD context parallelism takes PADDING_CAUSAL_MASK only (_FusedAttnCPWithAllGatherHelper and "
               "_FusedAttnCPWithP2PHelper.check_supported raise for any other mask)")


class _ContextParallel:
    """One TE reorder strategy with one TE CP strategy; subclasses set the class fields."""

    reorder: str = ""  # TE's ReorderStrategy member
    te_strategy: str = ""  # TE's CPStrategy member
    strategy: str = ""  # ours: all_gather or ring
    balance: str = ""  # ours: striped or dual_chunk_swap (the domain's cp fields: one strategy, one balance)

    def __init__(self):
        attention, cpp, self.where = _te()
        self.te = (attention, cpp)
        self.version = installed_version("transformer-engine") if not os.environ.get(ENV) else "checkout"
        self._runs = {}

    # the names TE's reorder takes for this layout
    def _stripe(self, layout):
        return int(layout.stripe) if self.balance == "striped" else None

    def unsupported_context_parallel(self, layout, problem):
        if int(layout.cp) < 1 or int(layout.stripe) < 1:
            return None  # a malformed layout: the suite's validation gives it cp_bad_layout, as it must
        if layout.strategy != self.strategy or layout.balance != self.balance:
            return (f"{type(self).__name__} runs TE's {self.reorder} reorder with {self.te_strategy}; "
                    f"{layout.balance} with {layout.strategy} is another class of this module or not TE's")
        sizes, stripes = self.domain.cp_sizes, self.domain.cp_stripes
        if int(layout.cp) not in sizes:
            return (f"cp = {layout.cp}: reorder_causal_dual_chunk_swap raises for an odd cp ('must be a multiple of 2')"
                    if self.balance == "dual_chunk_swap" else f"cp = {layout.cp} is outside {sizes}")
        if self.balance == "striped" and stripes and int(layout.stripe) not in stripes:
            return (f"stripe = {layout.stripe}: TE's ring takes stripe 1 only (fused_attn's docstring; "
                    "its top-left kernel mask on longer stripes is not causal attention)")
        b = problem.batch
        if b.mask not in CAUSAL_KINDS:
            return _NOT_CAUSAL
        if np.asarray(b.q_segment_ids).ndim != 2:
            return "extra dims: context parallelism splits [B, T] rows"
        if len(jax.devices("cpu")) < int(layout.cp):
            return f"cp = {layout.cp} needs as many CPU devices; this process has {len(jax.devices('cpu'))}"
        return None

    def _declined(self, layout, problem):
        reason = self.unsupported_context_parallel(layout, problem)
        if reason:
            raise Unsupported(reason)

    def _reordered(self, layout, x: np.ndarray, inverse: bool) -> np.ndarray:
        attention, _ = self.te
        fn = attention.inverse_reorder_causal_load_balancing if inverse else attention.reorder_causal_load_balancing
        try:
            return np.asarray(fn(jnp.asarray(x, jnp.int32), getattr(attention.ReorderStrategy, self.reorder),
                                 int(layout.cp), 1, self._stripe(layout)))
        except ValueError as e:
            if any(words in str(e) for words in NOT_DIVISIBLE):
                raise AttnOracleError("cp_not_divisible", f"TE: {e}") from None
            raise

    def cp_permutation(self, layout, problem):
        self._declined(layout, problem)
        rows, t = np.asarray(problem.batch.q_segment_ids).shape
        return self._reordered(layout, np.broadcast_to(np.arange(t), (rows, t)), False).astype(np.int64)

    def cp_reorder(self, layout, problem, values, width, inverse):
        self._declined(layout, problem)
        rows, t = np.asarray(problem.batch.q_segment_ids).shape
        given = np.asarray(values, np.float64)
        values = given.reshape(rows, t, int(width))
        index = np.arange(values.size).reshape(values.shape)
        return values.reshape(-1)[self._reordered(layout, index, bool(inverse)).reshape(-1)].reshape(given.shape)

    def _window(self, b):
        left = int(b.window[0])
        return None if left < 0 else (left, 0)

    def kernel_calls(self, layout, problem) -> dict:
        """{(rank, step): what TE handed the kernel}, TE's conventions applied to the batch."""
        self._declined(layout, problem)
        b = problem.batch
        ids = np.asarray(b.q_segment_ids)  # the positions TE is handed follow from the ids (te_positions)
        key = (int(layout.cp), self._stripe(layout), b.mask, tuple(b.window), int(b.max_segments),
               ids.tobytes(), ids.shape)
        if key not in self._runs:
            self._runs = {key: te_run(self.te, te_ids(ids), te_positions(ids), cp=int(layout.cp),
                                      strategy=self.te_strategy, reorder=self.reorder, stripe=self._stripe(layout),
                                      window=self._window(b), max_segments=int(b.max_segments))}
        return self._runs[key]

    def cp_rank_metadata(self, layout, problem, rank, step):
        from ._jax_common import check

        check(problem.batch)
        calls = self.kernel_calls(layout, problem)
        if (int(rank), int(step)) not in calls:
            raise AttnOracleError("bad_case", f"rank {rank}, step {step}: TE made no kernel call there "
                                              f"(calls: {sorted(calls)})")
        perm = self.cp_permutation(layout, problem)
        ids = np.asarray(problem.batch.q_segment_ids)
        local = perm.shape[1] // int(layout.cp)
        q_ids = np.take_along_axis(ids, perm[:, rank * local:(rank + 1) * local], axis=1)
        return metadata_from_call(calls[(int(rank), int(step))], q_ids, int(problem.batch.max_segments))


# What every class takes besides its layout: TE's THD context parallelism is causal self-attention
# over [B, T] rows (module docstring); positions of any kind are mapped.
_TAKES = dict(self_attention_only=True, extra_dims=False, mask_kinds=CAUSAL_KINDS)


class Striped(_ContextParallel):
    """ReorderStrategy.Striped, CPStrategy.ALL_GATHER (FusedAttnCPStripedWithAllGatherFwdPrimitive)."""

    name = "transformer-engine-jax-cp-striped-all-gather"
    reorder, te_strategy, strategy, balance = "Striped", "ALL_GATHER", "all_gather", "striped"
    # every stripe the suite draws (cp_stripes empty: all)
    domain = cp_domain(**_TAKES, cp_strategies=("all_gather",), cp_balances=("striped",), cp_sizes=(2, 3, 4, 8))


class StripedRing(_ContextParallel):
    """ReorderStrategy.Striped with stripe 1, CPStrategy.RING (FusedRingAttnStripedFwdPrimitive)."""

    name = "transformer-engine-jax-cp-striped-ring"
    reorder, te_strategy, strategy, balance = "Striped", "RING", "ring", "striped"
    domain = cp_domain(**_TAKES, cp_strategies=("ring",), cp_balances=("striped",), cp_sizes=(2, 3, 4, 8),
                       cp_stripes=(1,))


class DualChunkSwap(_ContextParallel):
    """ReorderStrategy.DualChunkSwap, CPStrategy.RING (TE's THD ring primitive; all-gather refuses it)."""

    name = "transformer-engine-jax-cp-dual-chunk-swap-ring"
    reorder, te_strategy, strategy, balance = "DualChunkSwap", "RING", "ring", "dual_chunk_swap"
    domain = cp_domain(**_TAKES, cp_strategies=("ring",), cp_balances=("dual_chunk_swap",), cp_sizes=(2, 4, 8))
