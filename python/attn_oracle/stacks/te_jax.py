"""TransformerEngine JAX's packed-batch metadata (transformer_engine.jax.attention), judged as metadata.

What runs is TE's own Python, the code its fused attention runs before the cuDNN
kernel: ``SequenceDescriptor.from_segment_ids_and_pos((q_ids, kv_ids),
(q_pos, kv_pos))`` and its ``get_seqlens_and_offsets(attn_mask_type,
QKVLayout.THD_THD_THD, window_size, max_segments_per_seq)`` give q/kv seqlens
[..., B, M] and offsets [..., B, M+1], which are our fields word for word; then
``FusedAttnFwdPrimitive.impl`` compacts them into the cu_seqlens and ragged
offsets it hands cuDNN. That compaction runs as TE wrote it, with the kernel
call replaced by a stub that records its arguments and stops (nothing after it
is metadata).

Where it comes from:

- the installed release (``transformer-engine`` 2.20.2, the pure-Python wheel
  that carries ``transformer_engine/jax``): on a machine where TE's native
  library imports (a CUDA machine with ``transformer-engine-jax`` built),
  ``transformer_engine.jax.attention`` is imported as is. Where it does not (any
  CPU-only machine: ``transformer-engine-jax`` ships as a source distribution
  that needs CUDA to build, and ``transformer_engine.jax`` loads the native
  library on import), the module loads ``transformer_engine/jax/attention.py``
  by itself from the installed files, with ``transformer_engine_jax`` replaced
  by enum names (the metadata functions only compare them) and
  ``cpp_extensions`` by an empty module (the metadata functions never call it);
  ``FusedAttnFwdPrimitive.impl``, ``FusedAttnHelper.parse_qkv_aval`` and
  ``generate_cu_seqlen`` are read out of ``cpp_extensions/attention.py`` and run
  with that stub kernel.
- a checkout or another release: ``ATTN_ORACLE_TE_JAX_ATTENTION=/path/to/
  transformer_engine/jax/attention.py`` (its ``cpp_extensions/attention.py``
  beside it is used when present, else the installed one's).

Conventions mapped:

- TE pads its cu_seqlens to R*M + 1 entries (repeating the total) and its
  ragged offsets to R*(M+1) (filling R*T); the module keeps the first S + 1,
  S = the documents with valid tokens on that side, the last ragged entry R*T.
- the window: ``(-1, -1)`` goes to TE as ``window_size=None`` (what a caller
  without a window passes); TE's metadata, like ours, never reflects a window.
- segment ids are broadcast to the common extra shape (TE vmaps both sides
  with one batch size); positions with fewer dims go to TE as they are.

Declined input classes (TE does not take them; python/tests/test_stack_te_jax.py
tries each against TE): positions past int32 (TE casts them to int32) and
positions that carry the extra dims (TE vmaps segment ids only), both said by
the domain (``max_position``, ``positions_extra_dims``) so that draws land
inside it; a side of 0 tokens (TE gives no seqlens or offsets for it), by the
hook. Attention is not run here (no cuDNN on CPU): there is no query that
attends nothing to map.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
import types
from functools import partial
from pathlib import Path

import numpy as np

from . import StackUnavailable, check_version, installed_version, require
from ._jax_common import check, rows
from ..errors import Unsupported
from attn_oracle import Domain
from attn_oracle.domain import MASK_KINDS

jax = require("TransformerEngine JAX", "jax", "jax", checked=("0.12",))
import jax.numpy as jnp  # noqa: E402

__all__ = ["Backend", "load_attention", "ENV"]

ENV = "ATTN_ORACLE_TE_JAX_ATTENTION"
CHECKED = ("2.20.2",)
INT32_MAX = np.iinfo(np.int32).max


class _Names(type):
    """transformer_engine_jax's enums as names: distinct, comparable, never called."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return f"{cls.__name__}.{name}"


def _native_stub() -> types.ModuleType:
    stub = types.ModuleType("transformer_engine_jax")
    stub.__doc__ = "attn-oracle's stand-in: the enum names the metadata code compares, no native code"
    for name in ("NVTE_Bias_Type", "NVTE_Mask_Type", "NVTE_QKV_Layout", "NVTE_QKV_Format", "NVTE_Softmax_Type"):
        setattr(stub, name, _Names(name, (), {}))

    def nvte_get_qkv_format(layout: str) -> str:
        name = layout.split(".")[-1]
        return "NVTE_QKV_Format." + ("NVTE_THD" if name.startswith("NVTE_T") else
                                     "NVTE_SBHD" if name.startswith("NVTE_SB") else "NVTE_BSHD")

    stub.nvte_get_qkv_format = nvte_get_qkv_format
    return stub


def _installed_attention() -> Path:
    spec = importlib.util.find_spec("transformer_engine")
    if spec is None or not spec.submodule_search_locations:
        raise StackUnavailable("TransformerEngine JAX: cannot find transformer_engine; install transformer-engine "
                               f"({', '.join(CHECKED)} checked), run scripts/stacks, or set {ENV}")
    path = Path(list(spec.submodule_search_locations)[0]) / "jax" / "attention.py"
    if not path.exists():
        raise StackUnavailable(f"TransformerEngine JAX: {path} is missing")
    return path


def _load_standalone(path: Path, package: str):
    """attention.py at ``path`` as ``package.attention``, the native pieces stubbed."""
    native = _native_stub()
    saved = sys.modules.get("transformer_engine_jax")
    sys.modules["transformer_engine_jax"] = native
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(path.parent)]
    sys.modules[package] = pkg
    tex = types.ModuleType(package + ".cpp_extensions")
    tex.__path__ = []
    sys.modules[tex.__name__] = tex
    pkg.cpp_extensions = tex
    try:
        spec = importlib.util.spec_from_file_location(package + ".attention", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("transformer_engine_jax", None)
        else:
            sys.modules["transformer_engine_jax"] = saved
    return module


class _KernelCalled(Exception):
    """Raised by the stub kernel: the compaction is done, its arguments are recorded."""

    def __init__(self, args):
        super().__init__("stub kernel")
        self.args = args


def _compaction(cpp_attention: Path, attention):
    """FusedAttnFwdPrimitive.impl of ``cpp_attention`` as a function of (q, k, v, ids, pos, config) -> kernel args."""
    tree = ast.parse(cpp_attention.read_text())
    wanted = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "generate_cu_seqlen":
            wanted["generate_cu_seqlen"] = node
        if isinstance(node, ast.ClassDef) and node.name in ("FusedAttnFwdPrimitive", "FusedAttnHelper"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (node.name, item.name) in (
                        ("FusedAttnFwdPrimitive", "impl"), ("FusedAttnHelper", "parse_qkv_aval")):
                    item.decorator_list = []
                    wanted[item.name] = item
    missing = {"generate_cu_seqlen", "impl", "parse_qkv_aval"} - set(wanted)
    if missing:
        raise StackUnavailable(f"TransformerEngine JAX: {cpp_attention} lacks {', '.join(sorted(missing))}")
    namespace = {"jax": jax, "jnp": jnp, "SequenceDescriptor": attention.SequenceDescriptor,
                 "QKVFormat": attention.QKVFormat, "QKVLayout": attention.QKVLayout,
                 "AttnMaskType": attention.AttnMaskType,
                 # releases before 2.5 pick the fill of unused seqlens by the cuDNN version (0 from 9.3 on)
                 "get_cudnn_version": lambda: (9, 10, 0)}
    code = compile(ast.Module(body=list(wanted.values()), type_ignores=[]), str(cpp_attention), "exec")
    exec(code, namespace)  # noqa: S102 - TE's own functions, read out of its file

    class FusedAttnHelper:
        parse_qkv_aval = staticmethod(namespace["parse_qkv_aval"])

    class _Inner:
        @staticmethod
        def bind(*args, **kwargs):  # the kernel's arguments, read by their names in impl
            local = sys._getframe(1).f_locals
            raise _KernelCalled([local[n] for n in ("q_cu_seqlen", "kv_cu_seqlen", "q_seq_offsets", "k_seq_offsets")])

    class FusedAttnFwdPrimitive:
        inner_primitive = _Inner()

    namespace["FusedAttnHelper"] = FusedAttnHelper
    namespace["FusedAttnFwdPrimitive"] = FusedAttnFwdPrimitive
    return namespace["impl"]


def _version_gate() -> None:
    """require()'s gate without the import: TE's package __init__ refuses to import without its native library."""
    version = installed_version("transformer-engine")
    if version == "unknown":
        raise StackUnavailable("TransformerEngine JAX: transformer-engine is not installed "
                               f"({', '.join(CHECKED)} checked); run scripts/stacks, or set {ENV}")
    check_version("TransformerEngine JAX", "transformer-engine", version, CHECKED)


def load_attention(path: str | None = None):
    """(attention module, impl, where it came from) for ``path`` or the installed release."""
    if path:
        path = Path(path)
        if not path.exists():
            raise StackUnavailable(f"TransformerEngine JAX: {ENV}={path} does not exist")
        attention = _load_standalone(path, "_attn_oracle_te_jax_checkout")
        cpp = path.parent / "cpp_extensions" / "attention.py"
        if not cpp.exists():
            cpp = _installed_attention().parent / "cpp_extensions" / "attention.py"
        return attention, _compaction(cpp, attention), f"{path} (native pieces stubbed)"
    _version_gate()
    try:
        attention = importlib.import_module("transformer_engine.jax.attention")
        where = f"transformer_engine.jax.attention {installed_version('transformer-engine')} (native library loaded)"
    except Exception:  # noqa: BLE001 - no native library here (TE's __init__ refuses): load the file by itself
        attention = None
    installed = _installed_attention()
    if attention is None:
        attention = _load_standalone(installed, "_attn_oracle_te_jax")
        where = f"{installed} {installed_version('transformer-engine')} (native pieces stubbed)"
    return attention, _compaction(installed.parent / "cpp_extensions" / "attention.py", attention), where


# TE JAX's AttnMaskType members for our kinds: the name upper-cased, with _MASK (no_mask is NO_MASK).
_MASKS = {kind: kind.upper() if kind == "no_mask" else f"{kind.upper()}_MASK" for kind in MASK_KINDS}


class Backend:
    """TE's SequenceDescriptor metadata and FusedAttnFwdPrimitive's compaction of it."""

    name = "transformer-engine-jax-metadata"
    # TE vmaps the segment ids only (positions [B, T]) and casts positions to int32
    domain = Domain(positions_extra_dims=False, max_position=int(INT32_MAX))

    def __init__(self):
        self.te, self.impl, self.where = load_attention(os.environ.get(ENV) or None)
        self.version = installed_version("transformer-engine") if self.where.startswith(("transformer_engine", "/")) \
            and not os.environ.get(ENV) else "checkout"
        self._compiled = {}

    def unsupported_metadata(self, b):
        for side in ("q", "kv"):
            ids, pos = np.asarray(getattr(b, f"{side}_segment_ids")), np.asarray(getattr(b, f"{side}_segment_pos"))
            if ids.shape[-1] == 0:
                return "a side of 0 tokens: TE's bincount and argwhere give no seqlens or offsets for it"
            if ids.ndim > 2 and pos.ndim == ids.ndim:
                return "positions with the extra dims of the segment ids: TE vmaps segment ids only (positions [B, T])"
            if pos.size and int(pos.max()) > INT32_MAX:
                return "positions past int32: TE casts segment positions to int32"
        return None

    @staticmethod
    def _window(b):
        return None if tuple(b.window) == (-1, -1) else tuple(int(w) for w in b.window)

    def _descriptor_fields(self, b, kind):
        """q/kv seqlens and offsets from SequenceDescriptor, in the batch's own shapes."""
        q_ids, kv_ids = np.asarray(b.q_segment_ids), np.asarray(b.kv_segment_ids)
        extra = np.broadcast_shapes(q_ids.shape[:-2], kv_ids.shape[:-2])
        q_ids = np.broadcast_to(q_ids, extra + q_ids.shape[-2:])
        kv_ids = np.broadcast_to(kv_ids, extra + kv_ids.shape[-2:])
        fields = self._jitted(self._descriptor, kind, self._window(b), b.max_segments)(
            *(np.asarray(a).astype(np.int32) for a in (q_ids, kv_ids, b.q_segment_pos, b.kv_segment_pos)))
        return extra, [np.asarray(a).astype(np.int64) for a in fields]

    def _descriptor(self, q_ids, kv_ids, q_pos, kv_pos, *, kind, window, max_segments):
        fields = te_seqlens_and_offsets(self.te, q_ids, kv_ids, q_pos, kv_pos, kind, window, max_segments)
        return fields["q_seqlens"], fields["kv_seqlens"], fields["q_offsets"], fields["kv_offsets"]

    def reproduction(self, case):
        """The call a reproduction makes (attn_oracle.repro): TE's public SequenceDescriptor."""
        from ..repro import StackCall

        return StackCall(
            imports=["import jax.numpy as jnp", "from transformer_engine.jax import attention  # TE's public module"],
            functions=[te_seqlens_and_offsets],
            fields={f: f for f in ("q_seqlens", "kv_seqlens", "q_offsets", "kv_offsets")},
            call="te_seqlens_and_offsets(attention, *(jnp.asarray(a, jnp.int32) for a in (q_ids, kv_ids, q_pos, kv_pos)), "
                 f"attention.AttnMaskType.{_MASKS[case.fields['mask']]}, None if window == (-1, -1) else window, "
                 "max_segments)",
            notes=["TE's metadata code is Python (transformer_engine/jax/attention.py): run this where "
                   "`transformer_engine.jax` imports (a CUDA machine with transformer-engine-jax). "
                   "Exit 1 (AssertionError) while it differs."])

    def _compaction_run(self, q_ids, q_pos, kv_ids, kv_pos, *, kind, window, max_segments):
        """The cu_seqlens and ragged offsets FusedAttnFwdPrimitive.impl hands the kernel, over [R, T] rows."""
        r, tq, tkv = q_ids.shape[0], q_ids.shape[1], kv_ids.shape[1]
        q = jax.ShapeDtypeStruct((r, tq, 1, 8), jnp.float32)
        kv = jax.ShapeDtypeStruct((r, tkv, 1, 8), jnp.float32)
        config = types.SimpleNamespace(attn_mask_type=kind, qkv_layout=self.te.QKVLayout.THD_THD_THD,
                                       window_size=window, max_segments_per_seq=max_segments,
                                       allow_fast_causal_path=True)
        given = {"q": q, "k": kv, "v": kv, "_q_segment_ids": q_ids, "_kv_segment_ids": kv_ids,
                 "_q_segment_pos": q_pos, "_kv_segment_pos": kv_pos, "config": config}
        args = {}
        for name in inspect.signature(self.impl).parameters:  # bias, seed, ...: None; seqlens and offsets: empty
            args[name] = given.get(name, jnp.zeros(0) if "seq" in name else None)
        try:
            self.impl(**args)
        except _KernelCalled as called:
            return tuple(called.args)
        raise RuntimeError("FusedAttnFwdPrimitive.impl returned without calling its kernel")

    def _jitted(self, fn, kind, window, max_segments):
        key = (fn.__name__, kind, window, max_segments)
        if key not in self._compiled:
            self._compiled[key] = jax.jit(partial(fn, kind=kind, window=window, max_segments=max_segments))
        return self._compiled[key]

    def metadata(self, b):
        check(b)
        reason = self.unsupported_metadata(b)
        if reason:
            raise Unsupported(reason)
        kind = getattr(self.te.AttnMaskType, _MASKS[b.mask])
        extra, (q_len, kv_len, q_off, kv_off) = self._descriptor_fields(b, kind)
        b_rows = np.asarray(b.q_segment_ids).shape[-2]
        m = b.max_segments
        out = {"q_seqlens": q_len.reshape(extra + (b_rows, m)), "kv_seqlens": kv_len.reshape(extra + (b_rows, m)),
               "q_offsets": q_off.reshape(extra + (b_rows, m + 1)), "kv_offsets": kv_off.reshape(extra + (b_rows, m + 1))}
        q_ids, q_pos, kv_ids, kv_pos = rows(b)
        compacted = self._jitted(self._compaction_run, kind, self._window(b), b.max_segments)(
            *(a.astype(np.int32) for a in (q_ids, q_pos, kv_ids, kv_pos)))
        q_cu, kv_cu, q_ragged, kv_ragged = (np.asarray(a).astype(np.int64).reshape(-1) for a in compacted)
        for side, cu, ragged, ids in (("q", q_cu, q_ragged, q_ids), ("kv", kv_cu, kv_ragged, kv_ids)):
            s = int((out[f"{side}_seqlens"] > 0).sum())
            out[f"cu_seqlens_{side}"] = cu[: s + 1]
            out[f"ragged_offsets_{side}"] = np.append(ragged[:s], ids.size)
        return out


def te_seqlens_and_offsets(attention, q_ids, kv_ids, q_pos, kv_pos, mask_type, window, max_segments):
    """TE's per-slot seqlens and offsets of a packed THD batch: the one place this module asks TE for them."""
    descriptor = attention.SequenceDescriptor.from_segment_ids_and_pos((q_ids, kv_ids), (q_pos, kv_pos))
    (q_len, kv_len), (q_off, kv_off) = descriptor.get_seqlens_and_offsets(
        mask_type, attention.QKVLayout.THD_THD_THD, window, max_segments)
    return {"q_seqlens": q_len, "kv_seqlens": kv_len, "q_offsets": q_off, "kv_offsets": kv_off}
