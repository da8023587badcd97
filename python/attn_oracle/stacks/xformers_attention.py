"""xformers: ``memory_efficient_attention`` on packed documents under its ``BlockDiagonal*`` biases.

``python -m attn_oracle check attn_oracle.stacks.xformers_attention:Flash`` (and ``:Cutlass``,
``:Dispatch``; a CUDA device: xformers' operators are CUDA only).

One class per operator, so that the report says which kernel ran:

==========  =====================================================================
Flash       ``op=(fmha.flash.FwOp, fmha.flash.BwOp)``: FlashAttention-2, torch's own
            (``aten::_flash_attention_forward``) unless the flash_attn package is there
Cutlass     ``op=(fmha.cutlass.FwOp, fmha.cutlass.BwOp)``: torch's
            ``aten::_efficient_attention_forward`` (the CUTLASS kernel)
Dispatch    ``op=None``: what xformers picks; its ``version`` names the operators
            picked for fp16 and fp32 causal calls (the kernels that ran) and whether
            ``xformers._C`` (its own compiled kernels) loaded
==========  =====================================================================

``xformers._C`` and the operators: 0.0.35's PyPI wheel
(``xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl``, no local version tag; its
``cpp_lib.json`` records a build on torch 2.10.0+cu128, CUDA 12.8) links ``_C.so``
against ``libcudart.so.12`` (its NEEDED entries: libc10, libtorch, libtorch_cpu,
libtorch_python, libcudart.so.12, libc10_cuda, libtorch_cuda and the C/C++ runtime;
no RPATH). The torch symbols it takes are torch's stable C ABI only (``aoti_torch_*``,
``torch_*``: no C++ symbol of c10, ATen or torch), which xformers' 0.0.34 release
notes say makes a build for torch 2.10 work with later torch releases. Where no
``libcudart.so.12`` is found, as with a CUDA 13 torch (``2.11.0+cu130`` on the device
image, ``2.15.0+cu132`` here), ``_C`` does not load, and xformers' warning blames the
torch and Python versions ("xFormers was built for: PyTorch 2.10.0+cu128 ... (you have
...)"); the real error is the ``OSError`` it chains (what ``XFORMERS_MORE_DETAILS=1``
prints). On a CPU machine with torch 2.15.0+cu132 the chain ends in "libcudart.so.12:
cannot open shared object file", and with ``libcudart.so.12`` (nvidia-cuda-runtime-cu12
12.8.90) on ``LD_LIBRARY_PATH`` the same ``_C.so`` loads against that torch. The
device image's load error is read from the version string below (not yet seen on a
device). xformers then refuses every operator on a CUDA tensor ("xFormers wasn't
build with CUDA support"), although the "-pt" ones call torch's own kernels and none
of ``_C``. The module lifts that gate (``_lift_build_gate``), so that what runs is
what a loaded ``_C`` runs: xformers' Python over torch's kernels. Operators that do
need ``_C`` still refuse for a reason of their own ("operator wasn't built"). Every
version string ends with the state of ``_C`` (the innermost load error, quoted) and
whether the gate was lifted.

The batch goes out through the project's cuDNN adapter (``attn_oracle.adapters.
cudnn_from_batch``, docs/conventions.md), whose vocabulary is xformers' too: one
sequence per document with valid tokens, trimmed to them, each sequence's
diagonal aligned top-left or bottom-right, an exclusive left bound and an
inclusive right bound. The sequences become the bias (``BlockDiagonalMask.
from_seqlens(q_lens, kv_lens)``), the tokens are gathered into ``[1, total, H, D]``
(GQA: ``[1, total, G, H/G, D]`` with the key heads expanded, xformers' BMGHK
layout; neither fa2B nor cutlassB takes BMGHK, so a backward gets the key heads
repeated, from fp32 leaves so that autograd sums their gradients in fp32):

===============================  ==========================================
no bound                         ``BlockDiagonalMask``
right bound 0, top-left          ``.make_causal()``; with a left bound L, ``.make_local_attention(L)``
right bound 0, bottom-right      ``.make_causal_from_bottomright()``; with L,
                                 ``.make_local_attention_from_bottomright(L)``
===============================  ==========================================

xformers' window size W is our left side + 1 (it counts the query's own key),
which is cuDNN's exclusive left bound: passed as it is.

Outputs: o and, by autograd through ``memory_efficient_attention``, dq, dk, dv.
lse where the operator serves partial attention (Flash, Dispatch when it picks
one that does): ``memory_efficient_attention_partial``, documented as
``[B, H, M]`` (``[B, G, H, M]`` for BMGHK). A query with no key gets lse +inf
from FlashAttention-2, mapped to the suite's -inf.

Declined, each with the library's own words:

- what the cuDNN convention cannot say (the adapter's ``unsupported``) and a
  batch the suite rejects;
- a window with a right side other than 0, or a left side without a causal
  term: xformers' block-diagonal biases that take two sides are its padded-keys
  ones (``BlockDiagonalLocalAttentionPaddedKeysMask``), which neither flash nor
  cutlass lists in ``SUPPORTED_ATTN_BIAS_TYPES`` (0.0.35); the domain says it
  (``causal_windows_only``), so the draws land inside;
- what a bias refuses when it is made (``BlockDiagonalCausalFromBottomRightMask``:
  a sequence with fewer keys than queries; ``make_local_attention``: a
  sequence whose last queries see no key), the ValueError or RuntimeError quoted;
- what the operator refuses (its ``not_supported_reasons``: dtype, head dim,
  bias type, layout), quoted; the domain keeps dtypes and head dims inside them;
- Dispatch: an input for which xformers' dispatch finds no operator
  (``NotImplementedError: No operator found``), each operator's reasons quoted;
- a call whose key side has no token (every query attends nothing) where the
  operator raises on it (0.0.35's flash: ``RuntimeError: cannot reshape tensor
  of 0 elements`` in its input conversion), quoted.

On a machine without CUDA the module imports and the kernel calls fail; the
mapping is tested on the CPU with the Flash operator's own Python over a stand-in
kernel (python/tests/standin_xformers.py).
"""

from __future__ import annotations

import numpy as np

from attn_oracle import adapters, packing
from attn_oracle.errors import Unsupported
from attn_oracle.stacks import convention_call, decline, installed_version, require
from attn_oracle import Domain

STACK, CHECKED = "xformers", ("0.0.35",)
torch = require(STACK, "torch", "torch", checked=("2.15", "2.11"))
xformers = require(STACK, "xformers", "xformers", checked=CHECKED)
fmha = require(STACK, "xformers.ops.fmha", "xformers", checked=CHECKED)
from attn_oracle.stacks._torch_common import (  # noqa: E402
    TORCH_DTYPES as DTYPES, has_cuda, leaf, lse_to_rows, to_numpy, tokens_to_rows)

__all__ = ["Flash", "Cutlass", "Dispatch", "call_layout", "load_error", "make_bias"]

TILE_HEAD_DIMS = (8, 16, 32, 64, 128, 256)  # fa2F: a multiple of 8, at most 256; cutlass: aligned to 8


def load_error(exc) -> str:
    """The innermost error of an exception's chain, as ``Type: message`` on one line.

    xformers raises its own ``xFormersInvalidLibException`` (which names the torch release
    ``_C`` was built for) from torch's ``OSError("Could not load this library: ...")``, which
    is raised from the dynamic loader's ``OSError`` (for 0.0.35 on a CUDA 13 torch:
    "libcudart.so.12: cannot open shared object file: No such file or directory")."""
    seen = set()
    while id(exc) not in seen and (exc.__cause__ or exc.__context__) is not None:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _lift_build_gate() -> str:
    """Where ``xformers._C`` did not load, lift xformers' build gate; what was done, in words.

    Every operator's ``not_supported_reasons`` says "xFormers wasn't build with CUDA
    support" on a CUDA tensor when ``xformers._C`` did not load (0.0.35's
    ``ops/fmha/common.py``: ``_built_with_cuda`` is whether it loaded). Why it did not load
    is the innermost error of the exception xformers kept (see the module's docstring:
    for 0.0.35 on a CUDA 13 torch, the missing ``libcudart.so.12``). The operators this
    module runs need none of ``_C``: fa2F/fa2B "-pt" call ``aten::_flash_attention_forward``
    / ``_backward``, cutlassF/B "-pt" ``aten::_efficient_attention_*``, torch's own kernels,
    the same with or without ``_C``. Those that do need it keep a reason of their own
    ("operator wasn't built")."""
    from xformers import _cpp_lib

    failed = _cpp_lib._cpp_library_load_exception
    if failed is None:
        return "xformers._C loaded"
    fmha.common._built_with_cuda = True
    return f"xformers._C not loaded ({load_error(failed)}): build gate lifted, torch's kernels run"


BUILD = _lift_build_gate()


def call_layout(batch) -> dict:
    """The cuDNN adapter's sequences for ``batch``, with the gather indices of each side."""
    call = convention_call(adapters.cudnn_from_batch, batch, convention="cuDNN's (and xformers') sequence convention",
                           unvalidated="xformers validates no ids")
    q_len, kv_len = [int(n) for n in call["seq_len_q"]], [int(n) for n in call["seq_len_kv"]]
    return {"q_len": q_len, "kv_len": kv_len, "alignment": call["diagonal_alignment"],
            "left": call["left_bound"], "right": call["right_bound"],
            "q_tokens": packing.span_tokens(call["ragged_offset_q"][:-1], q_len),
            "kv_tokens": packing.span_tokens(call["ragged_offset_kv"][:-1], kv_len)}


def make_bias(layout: dict, device):
    """The BlockDiagonal* bias for the layout, or Unsupported with what xformers says."""
    left, right = layout["left"], layout["right"]
    if right not in (None, 0) or (right is None and left is not None):
        raise Unsupported(f"a window with bounds (left {left}, right {right}): xformers' block-diagonal biases with "
                          "two sides are its padded-keys ones, which neither flash nor cutlass takes")
    try:
        base = fmha.attn_bias.BlockDiagonalMask.from_seqlens(layout["q_len"], layout["kv_len"], device=torch.device(device))
        if right is None:
            return base
        if layout["alignment"] == "top_left":
            return base.make_causal() if left is None else base.make_local_attention(int(left))
        return base.make_causal_from_bottomright() if left is None else base.make_local_attention_from_bottomright(int(left))
    except (ValueError, RuntimeError) as e:
        raise Unsupported(f"xformers refuses the bias: {e}") from None


class _Operator:
    """memory_efficient_attention with one operator pair (None: xformers' dispatch)."""

    name = "xformers"
    version = installed_version("xformers")
    device = "cuda" if has_cuda() else "cpu"
    outputs = ("lse", "gradients")
    ops = None  # (forward op, backward op), or None for the dispatcher
    # Neither fa2B nor cutlassB takes [B, M, G, H, K] ("operator does not support BMGHK format"):
    # a backward with GQA gets the key heads repeated.
    bmghk_backward = False
    # Positions from 0: the biases read a document by index from its first token. Windows ending at the
    # query: the one-sided biases (make_local_attention*) bound the left side under a causal diagonal.
    domain = Domain(positions_from_zero=True, causal_windows_only=True, head_dims=TILE_HEAD_DIMS)

    def refusals(self, inp, backward: bool) -> list:
        """What the operators say they cannot do with these inputs (their not_supported_reasons)."""
        if self.ops is None:
            return []
        ops = self.ops if backward else self.ops[:1]
        return [f"{op.NAME}: {reason}" for op in ops for reason in op.not_supported_reasons(inp)]

    def unsupported_attention(self, problem):
        return None if problem.dtype in DTYPES else f"dtype {problem.dtype}"

    def bias(self, layout):
        return make_bias(layout, self.device)

    def packed(self, problem, inputs, layout):
        """q, k, v leaves on the device ([total, H, D]) and the call's views of them."""
        dtype, grad = DTYPES[problem.dtype], problem.backward
        groups = problem.heads_q // problem.heads_kv
        repeat = groups > 1 and grad and not self.bmghk_backward
        def packed(a, tokens, as_dtype):
            return leaf(a.reshape(-1, a.shape[2], a.shape[3])[tokens], self.device, as_dtype, grad)
        q = packed(inputs.q, layout["q_tokens"], dtype)
        # Repeated key heads are summed back by autograd: in fp32, as a kernel with GQA would, not in fp16.
        k, v = (packed(a, layout["kv_tokens"], torch.float32 if repeat else dtype) for a in (inputs.k, inputs.v))
        if groups == 1:
            views = q[None], k[None], v[None]
        elif repeat:
            views = q[None], *(x.repeat_interleave(groups, 1).to(dtype)[None] for x in (k, v))
        else:  # BMGHK: G = the key heads, H = the query heads of each
            hkv, d = problem.heads_kv, problem.head_dim
            views = (q.reshape(-1, hkv, groups, d)[None],
                     *(x[:, :, None, :].expand(-1, hkv, groups, d)[None] for x in (k, v)))
        return (q, k, v), views

    def attention(self, problem, inputs):
        decline(self.unsupported_attention(problem))
        layout = call_layout(problem.batch)
        bias = self.bias(layout)
        (q, k, v), (qc, kc, vc) = self.packed(problem, inputs, layout)
        scale = problem.effective_scale
        inp = fmha.Inputs(query=qc, key=kc, value=vc, attn_bias=bias, scale=scale)
        refused = self.refusals(inp, problem.backward)
        if refused:
            raise Unsupported("xformers refuses: " + "; ".join(refused))
        try:
            o = fmha.memory_efficient_attention(qc, kc, vc, attn_bias=bias, scale=scale, op=self.ops)
        except NotImplementedError as e:  # the dispatch found no operator: its reasons, quoted
            if not str(e).startswith("No operator found"):
                raise
            raise Unsupported("xformers' dispatch finds no operator: " + _reasons(str(e))) from None
        except RuntimeError as e:
            if len(layout["kv_tokens"]):
                raise
            raise Unsupported(f"a call without a key: xformers raises {type(e).__name__}: {e}") from None
        total_q, hq, d = len(layout["q_tokens"]), problem.heads_q, problem.head_dim
        r, tq = inputs.q.shape[:2]
        out = {"o": tokens_to_rows(o.reshape(total_q, hq, d), layout["q_tokens"], (r, tq, hq, d))}
        if "lse" in self.outputs:
            out["lse"] = self.lse(qc, kc, vc, bias, scale, layout, r, tq, hq)
        if problem.backward:
            o.backward(torch.from_numpy(np.ascontiguousarray(
                inputs.do.reshape(-1, hq, d)[layout["q_tokens"]])).to(o.device, o.dtype).reshape(o.shape))
            out.update({name: tokens_to_rows(x.grad, tokens, side.shape)
                        for name, x, tokens, side in (("dq", q, layout["q_tokens"], inputs.q),
                                                      ("dk", k, layout["kv_tokens"], inputs.k),
                                                      ("dv", v, layout["kv_tokens"], inputs.v))})
        return out

    def lse(self, qc, kc, vc, bias, scale, layout, r, tq, hq):
        """lse [R, Hq, Tq] from memory_efficient_attention_partial: [1, H, M] (or [1, G, H, M])."""
        fw = self.ops[0] if self.ops else None
        with torch.no_grad():
            _, lse = fmha.memory_efficient_attention_partial(qc.detach(), kc.detach(), vc.detach(), attn_bias=bias,
                                                             scale=scale, op=fw)
        total_q = len(layout["q_tokens"])
        want = (1,) + tuple(qc.shape[2:-1]) + (total_q,)
        if tuple(lse.shape) != want:
            raise AssertionError(f"memory_efficient_attention_partial's lse has shape {tuple(lse.shape)}; this module "
                                 f"reads {want} (B, [G,] H, M)")
        return lse_to_rows(to_numpy(lse).reshape(hq, total_q), layout["q_tokens"], r, tq)


def _reasons(message: str) -> str:
    """xformers' "No operator found" message on one line: each operator and why it refuses."""
    operators = message[message.find("\n`") + 1:] if "\n`" in message else message
    return " ".join(line.strip() for line in operators.splitlines() if line.strip())


class Flash(_Operator):
    """memory_efficient_attention with xformers' FlashAttention-2 operators."""

    name = "xformers-flash"
    ops = (fmha.flash.FwOp, fmha.flash.BwOp)
    version = f"{installed_version('xformers')} ({fmha.flash.FwOp.NAME}, {fmha.flash.BwOp.NAME}; {BUILD})"
    # fa2F: fp16 and bf16. Self-attention: fa2F takes BlockDiagonalCausalMask only with as many keys as
    # queries in every sequence, and the bottom-right biases refuse fewer keys than queries (96% judged).
    domain = Domain(dtypes=("fp16", "bf16"), head_dims=TILE_HEAD_DIMS, positions_from_zero=True,
                    self_attention_only=True, causal_windows_only=True)


class Cutlass(_Operator):
    """memory_efficient_attention with xformers' CUTLASS operators (torch's efficient-attention kernel)."""

    name = "xformers-cutlass"
    ops = (fmha.cutlass.FwOp, fmha.cutlass.BwOp)
    outputs = ("gradients",)  # cutlassF serves no partial attention: no lse
    version = f"{installed_version('xformers')} ({fmha.cutlass.FwOp.NAME}, {fmha.cutlass.BwOp.NAME}; {BUILD})"


def _picked() -> str:
    """The operators xformers' dispatch picks for a causal call of head dim 8 and 64 in fp16 and
    fp32 (the kernels that run), and the state of _C."""
    if not has_cuda():
        return f"no CUDA device; {BUILD}"
    from xformers.ops.fmha import dispatch

    picks = []
    for dtype, d in ((torch.float16, 64), (torch.float32, 64), (torch.float32, 8)):
        x = torch.zeros(1, 64, 2, d, device="cuda", dtype=dtype)
        bias = fmha.attn_bias.BlockDiagonalMask.from_seqlens([32, 32], device="cuda").make_causal()
        inp = fmha.Inputs(query=x, key=x, value=x, attn_bias=bias)
        name = f"{str(dtype).removeprefix('torch.')} d{d}"
        try:
            fw = dispatch._dispatch_fw(inp, True)
            picks.append(f"{name}: {fw.NAME}, {dispatch._dispatch_bw(inp, fw.VARLEN_LSE_PACKED).NAME}")
        except Exception as e:  # noqa: BLE001 - the note says what went wrong instead
            picks.append(f"{name}: none ({type(e).__name__})")
    return f"picks {'; '.join(picks)}; {BUILD}"


class Dispatch(_Operator):
    """memory_efficient_attention as most users call it: op=None, xformers picks the operators."""

    name = "xformers-dispatch"
    version = f"{installed_version('xformers')} ({_picked()})"
    outputs = ("gradients",)  # the picked operator may serve no partial attention
