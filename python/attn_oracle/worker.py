"""Serve a Python backend to attn-oracle: ``attn_oracle.serve(MyBackend())``.

The suite runs the worker as a process (``attn-oracle check --backend
'exec:python3 -m attn_oracle.worker my_module:MyBackend'``, the current
directory on ``sys.path``) and sends it one request at a time over stdin/stdout
(docs/protocol.md). A backend is a plain object; each capability is served when
its methods exist (the names mirror seam/include/attn_oracle/seam/backend.hpp):

==========  ================================================================
metadata    ``metadata(batch) -> dict``: q_seqlens, kv_seqlens [..., B, M],
            q_offsets, kv_offsets [..., B, M+1], cu_seqlens_q, cu_seqlens_kv,
            ragged_offsets_q, ragged_offsets_kv [S+1] (integer arrays); and
            optionally max_seqlen_q, max_seqlen_kv (ints) and indices_q,
            indices_kv [N] (unpad indices), judged when returned
attention   ``attention(problem, inputs) -> dict``: o [R, Tq, Hq, D], lse
            [R, Hq, Tq] (natural log, -inf where a query attends nothing) and,
            when ``problem.backward``, dq, dk, dv in the input layouts
small_seq   ``small_seq(problem, inputs) -> dict``: o, p [docs, Hq, 16] and the
            gradients when backward
sharding    ``validate_sharding(sharding, shapes) -> None`` (raise
            AttnOracleError for an invalid call) and ``sharded_attention(
            sharding, problem, inputs)`` (as attention)
kv_buffer   ``kv_micro_sequence(problem, i)``, and any of the steps
            ``kv_write_slice(problem, i, slice, buffer) -> buffer``,
            ``kv_attend(problem, i, micro, buffer, grad_buffer)``,
            ``kv_stream(problem, inputs)``; see docs/python.md
context_    ``cp_permutation(layout, problem)``: int [B, T], the row token of
parallel    each rank-major local slot; and any of ``cp_rank_metadata(layout,
            problem, rank, step)`` (as metadata, of that rank's kernel call);
            ``cp_rank_attention(layout, problem, inputs, rank, step)``: o, lse
            of the rank's queries at that step; ``cp_attention(layout,
            problem, inputs)``: o, lse and the gradients, rank-major (a
            property that calls one the backend lacks is skipped). Optional:
            ``validate_cp_layout(layout, problem)`` (raise AttnOracleError;
            without it the suite's validate_cp is used), ``cp_reorder(layout,
            problem, values, width, inverse)`` (without it, the permutation is
            applied) and ``cp_balance_bound(layout, problem) -> float |
            None``. The
            ``layout`` is a :class:`Layout`; see docs/python.md
==========  ================================================================

A result is a dict or any object with those attributes (a dataclass). Arrays
may be any NumPy integer or float dtype (bfloat16 is sent as float32); a JAX or
torch backend converts at its edge (``np.asarray(x)``).

Declining and rejecting: raise ``attn_oracle.errors.Unsupported(reason)`` from
any call, or define ``unsupported_<capability>(...)`` (same arguments as the
call, without the tensors) returning a reason or None, which the suite asks
before it draws and runs a case; raise ``AttnOracleError(code, message)`` for an
input the backend rejects (codes as in docs/semantics.md). Any other exception
fails the case with its traceback; the worker goes on. Optional attributes:
``name``, ``version`` (shown in reports), ``token_level_mask = True`` for a
backend that computes the mask of docs/semantics.md#2-the-attention-mask on any input, as a reference does,
and ``outputs``: the optional outputs it produces, among ``"lse"``,
``"gradients"`` and ``"small_seq_p"`` (default: all). A backend with
``outputs = ("gradients",)`` returns no lse; properties judge what it produces
and the summary says "lse not compared"; one without ``"gradients"`` is given
forward problems only. ``lse_dtype = "input"``: the backend stores lse in the
problem's dtype (jax.nn, MaxText), so lse is judged at that precision rather
than fp32's.

``domain``: the inputs the backend takes, an :class:`attn_oracle.Domain` (or a
dict of its fields), sent in the hello: the suite draws inside it, so a budget
of N draws judges about N instead of declining most of them. ``Domain(
self_attention_only=True, no_padding=True, positions_from_zero=True,
extra_dims=False, mask_kinds=("causal", "no_mask"), windows=False)`` is the
packed path of transformers or Megatron-core; ``dtypes`` and ``head_dims``
narrow the shapes; ``max_rows`` the batch; ``cp_strategies``, ``cp_balances``,
``cp_sizes`` and ``cp_stripes`` the context-parallel layouts. ``unsupported_<capability>`` stays
for what a domain cannot say (a size limit). A property that needs what the
domain excludes is skipped with the reason.

Anything the backend prints, its module at import included, goes to stderr
(kept in the suite's report when a case fails); stdout belongs to the protocol.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _protocol
from .domain import declared_domain
from .errors import AttnOracleError, Unsupported

__all__ = ["Batch", "Problem", "Inputs", "Sharding", "KvBufferProblem", "Layout", "serve", "main"]

CAPABILITIES = {
    "metadata": ("metadata",),
    "attention": ("attention",),
    "small_seq": ("small_seq",),
    "sharding": ("validate_sharding", "sharded_attention"),
    "kv_buffer": ("kv_micro_sequence",),
    "context_parallel": ("cp_permutation",),
}
# The K/V buffer steps after kv_micro_sequence, each optional: a property that
# calls one the backend lacks is skipped (docs/python.md, "The K/V buffer").
KV_BUFFER_STEPS = {"write_slice": "kv_write_slice", "attend": "kv_attend", "stream": "kv_stream"}
# The optional context-parallel ops: the suite's own stands in for one the
# backend lacks (the hello's context_parallel_ops, docs/protocol.md).
CONTEXT_PARALLEL_OPS = ("cp_rank_metadata", "cp_rank_attention", "cp_attention", "validate_cp_layout", "cp_reorder",
                        "cp_balance_bound")


@dataclass
class Batch:
    """A packed batch (docs/semantics.md#1-inputs). Ids [..., B, T]; positions a trailing suffix of that shape."""

    q_segment_ids: np.ndarray
    q_segment_pos: np.ndarray
    kv_segment_ids: np.ndarray
    kv_segment_pos: np.ndarray
    mask: str  # one of attn_oracle.domain.MASK_KINDS
    window: tuple[int, int]  # (left, right); a negative side is unbounded
    max_segments: int  # M


@dataclass
class Problem:
    """An attention problem: the batch plus heads, head_dim, dtype (fp32, fp16, bf16), scale, backward."""

    batch: Batch
    heads_q: int
    heads_kv: int
    head_dim: int
    scale: Optional[float]  # None: 1 / sqrt(head_dim)
    dtype: str
    backward: bool

    @property
    def effective_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale


@dataclass
class Inputs:
    """Tensors in float64, their values exactly representable in the problem's dtype.

    q [R, Tq, Hq, D], k and v [R, Tkv, Hkv, D], do like q (None unless backward), with
    R = prod(extra dims) * B; a malformed problem's tensors arrive flat. For the K/V
    buffer, one row: [N, H, D].
    """

    q: np.ndarray
    k: Optional[np.ndarray]
    v: Optional[np.ndarray]
    do: Optional[np.ndarray]


@dataclass
class Sharding:
    """A mesh [(axis, size), ...] and per-dim axis lists for q, k, v ([B, T, H, D]) and segment ids ([B, T])."""

    mesh: list
    q: list
    k: list
    v: list
    segment_ids: list


@dataclass
class KvBufferProblem:
    """The shared K/V buffer (docs/semantics.md#3-metadata): document lengths, micro-sequence size m, heads, head_dim, dtype, scale, backward."""

    doc_lengths: np.ndarray
    micro_seq_tokens: int
    heads_q: int
    heads_kv: int
    head_dim: int
    scale: Optional[float]
    dtype: str
    backward: bool


@dataclass
class Layout:
    """A context-parallel layout (docs/semantics.md#91-context-parallelism, model/context_parallel.hpp):
    ``cp`` ranks, a ``strategy`` (all_gather, ring, all_to_all) and a ``balance``
    (contiguous, dual_chunk_swap, striped, head_tail, explicit_indices); ``stripe``
    tokens a stripe (striped), ``indices`` [B, T] the caller's permutation
    (explicit_indices; None otherwise)."""

    cp: int
    strategy: str  # one of attn_oracle.domain.CP_STRATEGIES
    balance: str  # one of attn_oracle.domain.CP_BALANCES
    stripe: int = 1
    indices: Optional[np.ndarray] = None

    @property
    def steps(self) -> int:
        """The kernel calls a rank makes: cp ring steps, else 1."""
        return self.cp if self.strategy == "ring" else 1

    def source_rank(self, rank: int, step: int) -> int:
        """The rank whose keys ``rank`` meets at ring ``step``: (rank - step) mod cp; ``rank`` itself otherwise."""
        return (rank - step) % self.cp if self.strategy == "ring" else rank


# ------------------------------------------------------------------ requests
def _scale(value) -> Optional[float]:
    return None if value is None else float(value)  # "nan", "inf", "-inf" travel as strings


def _batch(h: dict, a: dict) -> Batch:
    b = h["batch"]
    return Batch(a["q_segment_ids"], a["q_segment_pos"], a["kv_segment_ids"], a["kv_segment_pos"],
                 b["mask"], tuple(b["window"]), b["max_segments"])


def _problem(h: dict, a: dict) -> Problem:
    s = h["shape"]
    return Problem(_batch(h, a), s["heads_q"], s["heads_kv"], s["head_dim"], _scale(s["scale"]), s["dtype"],
                   s["backward"])


def _inputs(a: dict) -> Inputs:
    return Inputs(a["q"], a.get("k"), a.get("v"), a.get("do"))


def _sharding(h: dict) -> Sharding:
    s = h["sharding"]
    return Sharding([tuple(axis) for axis in s["mesh"]], s["q"], s["k"], s["v"], s["segment_ids"])


def _kv_problem(h: dict) -> KvBufferProblem:
    p, s = h["problem"], h["problem"]["shape"]
    return KvBufferProblem(np.asarray(p["doc_lengths"], dtype=np.int64), p["micro_seq_tokens"], s["heads_q"],
                           s["heads_kv"], s["head_dim"], _scale(s["scale"]), s["dtype"], s["backward"])


def _layout(h: dict) -> Layout:
    c = h["cp"]
    indices = np.asarray(c["indices"], dtype=np.int64) if "indices" in c else None
    return Layout(c["size"], c["strategy"], c["balance"], c.get("stripe", 1), indices)


def _field(result: Any, name: str, required: bool = True):
    value = result.get(name) if isinstance(result, dict) else getattr(result, name, None)
    if value is None and required:
        raise TypeError(f"the backend's result lacks {name!r} (got {type(result).__name__})")
    return value


def _fields(result: Any, names) -> dict:
    return {name: _field(result, name) for name in names}


METADATA_FIELDS = ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets", "cu_seqlens_q", "cu_seqlens_kv",
                   "ragged_offsets_q", "ragged_offsets_kv")
# Judged exactly when a backend returns them (docs/python.md, "Optional metadata fields").
OPTIONAL_METADATA_FIELDS = ("max_seqlen_q", "max_seqlen_kv", "indices_q", "indices_kv")
MICRO_SEQUENCE_FIELDS = ("cu_seqlens_q", "cu_seqlens_k", "q_document", "q_position", "kv_document", "kv_position")


OPTIONAL_OUTPUTS = ("lse", "gradients", "small_seq_p")


def produced_outputs(backend) -> tuple:
    """The optional outputs a backend produces: its ``outputs`` attribute, or all of them."""
    declared = getattr(backend, "outputs", None)
    if declared is None:
        return OPTIONAL_OUTPUTS
    unknown = [o for o in declared if o not in OPTIONAL_OUTPUTS]
    if isinstance(declared, str) or unknown:
        raise TypeError(f"the backend's outputs {declared!r} must list optional outputs among {OPTIONAL_OUTPUTS}")
    return tuple(o for o in OPTIONAL_OUTPUTS if o in declared)


LSE_DTYPES = ("float32", "input")


def lse_dtype(backend) -> str:
    """The backend's ``lse_dtype``: "float32" (default) or "input" (lse stored in the problem's dtype)."""
    value = getattr(backend, "lse_dtype", "float32")
    if value not in LSE_DTYPES:
        raise TypeError(f"the backend's lse_dtype {value!r} must be one of {LSE_DTYPES}")
    return value


OPTIONAL_ARRAYS = {"lse": "lse", "p": "small_seq_p"}  # array -> the optional output it belongs to


def _outputs(backend, result: Any, first: tuple, backward: bool) -> dict:
    produced = produced_outputs(backend)
    names = tuple(n for n in first if n not in OPTIONAL_ARRAYS or OPTIONAL_ARRAYS[n] in produced)
    return _fields(result, names + (("dq", "dk", "dv") if backward and "gradients" in produced else ()))


# ------------------------------------------------------------------ ops
def _metadata_reply(result) -> tuple[dict, dict]:
    optional = {name: np.asarray(value).reshape(-1) for name in OPTIONAL_METADATA_FIELDS
                if (value := _field(result, name, required=False)) is not None}
    return {}, _fields(result, METADATA_FIELDS) | optional


def _op_metadata(backend, h, a):
    return _metadata_reply(backend.metadata(_batch(h, a)))


def _op_attention(backend, h, a):
    p = _problem(h, a)
    return {}, _outputs(backend, backend.attention(p, _inputs(a)), ("o", "lse"), p.backward)


def _op_small_seq(backend, h, a):
    p = _problem(h, a)
    return {}, _outputs(backend, backend.small_seq(p, _inputs(a)), ("o", "p"), p.backward)


def _op_validate_sharding(backend, h, a):
    backend.validate_sharding(_sharding(h), h["shapes"])
    return {}, {}


def _op_sharded_attention(backend, h, a):
    p = _problem(h, a)
    return {}, _outputs(backend, backend.sharded_attention(_sharding(h), p, _inputs(a)), ("o", "lse"), p.backward)


def _op_kv_micro_sequence(backend, h, a):
    r = backend.kv_micro_sequence(_kv_problem(h), h["i"])
    scalars = {k: int(_field(r, k)) for k in ("index", "begin", "end", "first_document_begin")}
    return scalars, _fields(r, MICRO_SEQUENCE_FIELDS)


def _op_kv_write_slice(backend, h, a):
    buffer = a["buffer"]
    result = backend.kv_write_slice(_kv_problem(h), h["i"], a["slice"], buffer)
    return {}, {"buffer": buffer if result is None else result}  # None: written in place


def _op_kv_attend(backend, h, a):
    p = _kv_problem(h)
    grad = a.get("grad_buffer")
    r = backend.kv_attend(p, h["i"], Inputs(a["q"], None, None, a.get("do")), a["buffer"], grad)
    out = _fields(r, ("o", "lse") + (("dq",) if p.backward else ()))
    if grad is not None:
        returned = _field(r, "grad_buffer", required=False)
        out["grad_buffer"] = grad if returned is None else returned  # None: accumulated in place
    return {}, out


def _op_kv_stream(backend, h, a):
    p = _kv_problem(h)
    return {}, _outputs(backend, backend.kv_stream(p, _inputs(a)), ("o", "lse"), p.backward)


def _op_validate_cp_layout(backend, h, a):
    backend.validate_cp_layout(_layout(h), _problem(h, a))
    return {}, {}


def _op_cp_permutation(backend, h, a):
    # Sent as returned: the suite names a wrong shape, dtype or a token listed twice.
    return {}, {"permutation": backend.cp_permutation(_layout(h), _problem(h, a))}


def _op_cp_reorder(backend, h, a):
    values = backend.cp_reorder(_layout(h), _problem(h, a), a["values"], h["width"], h["inverse"])
    return {}, {"values": values}


def _op_cp_rank_metadata(backend, h, a):
    return _metadata_reply(backend.cp_rank_metadata(_layout(h), _problem(h, a), h["rank"], h["step"]))


def _op_cp_rank_attention(backend, h, a):
    result = backend.cp_rank_attention(_layout(h), _problem(h, a), _inputs(a), h["rank"], h["step"])
    return {}, _outputs(backend, result, ("o", "lse"), False)  # a rank's forward, before any merge


def _op_cp_attention(backend, h, a):
    p = _problem(h, a)
    return {}, _outputs(backend, backend.cp_attention(_layout(h), p, _inputs(a)), ("o", "lse"), p.backward)


def _op_cp_balance_bound(backend, h, a):
    bound = backend.cp_balance_bound(_layout(h), _problem(h, a))
    if bound is not None:
        bound = float(bound)
        if not math.isfinite(bound):  # JSON has no number for it
            raise ValueError(f"cp_balance_bound returned {bound}: a finite number, or None for no promise")
    return {"bound": bound}, {}


def _op_unsupported(backend, h, a):
    capability = h["capability"]
    hook = getattr(backend, "unsupported_" + capability)
    args = {"metadata": lambda: (_batch(h, a),), "attention": lambda: (_problem(h, a),),
            "small_seq": lambda: (_problem(h, a),), "sharding": lambda: (_sharding(h), h["shapes"]),
            "kv_buffer": lambda: (_kv_problem(h),),
            "context_parallel": lambda: (_layout(h), _problem(h, a))}[capability]()
    reason = hook(*args)
    if reason is not None:
        raise Unsupported(str(reason))
    return {}, {}


OPS = {name[len("_op_"):]: fn for name, fn in globals().items() if name.startswith("_op_")}


# ------------------------------------------------------------------ JAX's compilation cache
# Every draw has new shapes, so a jitted JAX backend compiles on most calls and
# compilation is most of a run's wall time. JAX's persistent cache keeps the
# compiled programs between runs; its defaults only keep compiles over 1 s,
# and nearly every compile of a drawn case on a CPU is shorter.
JAX_CACHE_THRESHOLDS = {"jax_persistent_cache_min_compile_time_secs": 0,
                        "jax_persistent_cache_min_entry_size_bytes": -1}  # -1: no minimum size


def jax_cache_dir(environ) -> Optional[str]:
    """Where the worker keeps JAX's compiled programs: $ATTN_ORACLE_JAX_CACHE,
    else attn-oracle/jax under the user's cache directory; None when it is "off"."""
    chosen = environ.get("ATTN_ORACLE_JAX_CACHE", "")
    if chosen == "off":
        return None
    if chosen:
        return chosen
    cache_home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "attn-oracle", "jax")


def _jax_cache_note(jax, environ) -> Optional[str]:
    """Turn JAX's cache on unless the user chose one or turned ours off; what to tell."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return f"JAX compilation cache at {environ['JAX_COMPILATION_CACHE_DIR']} (set by JAX_COMPILATION_CACHE_DIR)"
    theirs = getattr(jax.config, "jax_compilation_cache_dir", None)
    if theirs:
        return f"JAX compilation cache at {theirs} (set by the backend)"
    directory = jax_cache_dir(environ)
    if directory is None:
        return None
    try:
        for name, value in JAX_CACHE_THRESHOLDS.items():  # first, so a JAX without them gets no half-made cache
            jax.config.update(name, value)
        jax.config.update("jax_compilation_cache_dir", directory)
    except Exception as e:  # an older or newer JAX: serve without the cache rather than not at all
        return f"JAX compilation cache not turned on: {type(e).__name__}: {e}"
    return f"JAX compilation cache at {directory} (set ATTN_ORACLE_JAX_CACHE=off to disable)"


def enable_jax_compilation_cache(environ=None) -> list:
    """When the backend imported jax, turn on its persistent compilation cache
    (before the backend's first compile: JAX reads the setting once). Returns the
    notes for the hello, each also printed on stderr."""
    jax = sys.modules.get("jax")
    note = None if jax is None else _jax_cache_note(jax, os.environ if environ is None else environ)
    if note is None:
        return []
    note = "attn_oracle.worker: " + note
    print(note, file=sys.stderr)
    return [note]


# ------------------------------------------------------------------ serving
def kv_buffer_steps(backend) -> list:
    """The K/V buffer steps a backend serves; a step without kv_micro_sequence is an error naming it."""
    steps = [step for step, method in KV_BUFFER_STEPS.items() if callable(getattr(backend, method, None))]
    if steps and not callable(getattr(backend, "kv_micro_sequence", None)):
        raise TypeError(f"{type(backend).__name__} serves {', '.join(KV_BUFFER_STEPS[s] for s in steps)} but not "
                        "kv_micro_sequence(problem, i), which the kv_buffer capability needs first "
                        "(docs/python.md, \"The K/V buffer\")")
    return steps


def hello(backend, notes=()) -> dict:
    """What the worker says first: protocol, name, version, capabilities, decline hooks, outputs, notes."""
    served = [c for c, methods in CAPABILITIES.items() if all(callable(getattr(backend, m, None)) for m in methods)]
    steps = kv_buffer_steps(backend)
    return {
        "outputs": list(produced_outputs(backend)),
        "protocol": _protocol.PROTOCOL,
        "name": str(getattr(backend, "name", type(backend).__name__)),
        "version": str(getattr(backend, "version", "unversioned")),
        "capabilities": served,
        "unsupported_hooks": [c for c in served if callable(getattr(backend, "unsupported_" + c, None))],
        "token_level_mask": bool(getattr(backend, "token_level_mask", False)),
        **({"arch": str(backend.arch)} if getattr(backend, "arch", None) else {}),
        **({"lse_dtype": lse_dtype(backend)} if hasattr(backend, "lse_dtype") else {}),
        **({"kv_buffer_steps": steps} if "kv_buffer" in served else {}),
        **({"context_parallel_ops": [op for op in CONTEXT_PARALLEL_OPS if callable(getattr(backend, op, None))]}
           if "context_parallel" in served else {}),
        **({"domain": domain.to_hello()} if (domain := declared_domain(backend)) is not None else {}),
        **({"notes": list(notes)} if notes else {}),
    }


def answer(backend, header: dict, arrays: dict) -> tuple[dict, dict]:
    """The reply (header, arrays) to one request."""
    try:
        scalars, out = OPS[header["op"]](backend, header, arrays)
        # Converted here, so that a result no wire dtype holds fails the case and not the worker.
        return {"ok": True, **scalars}, {name: _protocol.wire_array(value) for name, value in out.items()}
    except Unsupported as e:
        return {"unsupported": e.reason}, {}
    except AttnOracleError as e:
        return {"error": {"code": e.code, "message": e.message}}, {}
    except Exception as e:  # the backend's bug: the case fails with it, the worker goes on
        return {"exception": {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}}, {}


def _exit_with_parent() -> None:
    """A daemon thread: when the suite that started us is gone, so are we (even mid-call)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="attn-oracle-parent-watch").start()


def _take_protocol_streams():
    """The protocol's (stdin, stdout), moved off fds 0 and 1: from here on print()
    and anything else written to fd 1 go to stderr, and fd 0 reads nothing."""
    stdin = os.fdopen(os.dup(0), "rb")
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints land on stderr, not in the protocol
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _exit_with_parent()
    return stdin, stdout


def serve(backend, stdin=None, stdout=None, notes=()) -> None:
    """Answer requests on stdin until it closes. Keeps stdout for the protocol:
    print() and anything else written to fd 1 go to stderr instead. NOTES go
    into the hello."""
    if stdin is None or stdout is None:
        stdin, stdout = _take_protocol_streams()
    _protocol.write_frame(stdout, hello(backend, notes))
    while (request := _protocol.read_frame(stdin)) is not None:
        header, arrays = request
        _protocol.write_frame(stdout, *answer(backend, header, arrays))


def main(argv=None) -> int:
    """``python -m attn_oracle.worker MODULE:CLASS``: serve CLASS() (the current directory on sys.path)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m attn_oracle.worker MODULE:CLASS", file=sys.stderr)
        return 2
    module_name, _, class_name = argv[0].partition(":")
    sys.path.insert(0, os.getcwd())
    # Before the import: a library that prints when imported must not write
    # ahead of the hello.
    stdin, stdout = _take_protocol_streams()
    try:
        backend_class = getattr(importlib.import_module(module_name), class_name)
    except ImportError as e:
        if type(e).__name__ != "StackUnavailable":
            raise
        print(f"attn-oracle: {e}", file=sys.stderr)  # one line: which stack, and why it cannot run here
        return 3
    notes = enable_jax_compilation_cache()  # before the backend is made: its constructor may compile
    serve(backend_class(), stdin, stdout, notes=notes)
    return 0


if __name__ == "__main__":
    # Served by the importable module, not this __main__ copy of it, so that
    # the backend's attn_oracle.Domain is the class hello() knows.
    from attn_oracle import worker

    sys.exit(worker.main())
