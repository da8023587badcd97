"""JAX's cuDNN fused attention (jax 0.12 checked here, 0.11.2 on the device image), two ways callers pack batches.

- :class:`Lengths`: the public ``jax.nn.dot_product_attention(implementation=
  "cudnn")`` with ``query_seq_lengths`` / ``key_value_seq_lengths``: one
  document per row, then padding (as ``jax_nn.Lengths``); q and kv may differ.
- :class:`Packed`: the packed THD path, per-document lengths and offsets:
  ``jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(q_seqlen=
  [B, M], kv_seqlen=[B, M], q_offsets=[B, M+1], kv_offsets=[B, M+1])``, -1 past
  a row's last document. No public JAX API takes offsets (``jax.nn`` holds one
  length per row); MaxText's ``cudnn_flash_jax`` kernel imports this same
  function. The spans are the reference's documents (``packing.documents``),
  as a TransformerEngine-style caller computes them; a document with no token
  on one side is left out (its queries attend nothing).

Both run under one ``jax.jit`` with ``jax.vjp`` and compile per shape: draw
shape-stable (``--shape-stable``). Without a GPU the import fails with one line
(``StackUnavailable``); ``python/tests/jax_cudnn_standin.py`` puts a stand-in
for the cuDNN custom call under JAX's own code, so the mapping is tested on CPU.

Domain: positions from 0 in every document (cuDNN's causal term and window act
on the token index from the start of a sequence, where an index difference is a
position difference). Declined, each by the library:

- fp32: cuDNN's fused attention takes fp16 and bf16 (``check_layout`` raises);
- head dims that are not a multiple of 8 or past 128 (256 on Hopper):
  ``check_is_flash_attention`` raises; the domain lists 8, 64 and 128;
- a window with a right side under a kind without a causal term: cuDNN's
  window is ``sliding_window_length`` W, the band ``(i - W, i]`` (jax.nn raises
  "cuDNN doesn't support right window").

Declined by convention: the bottom-right kinds (``MaskType`` has NO_MASK,
PADDING, CAUSAL, PADDING_CAUSAL; causal is top-left). :class:`Lengths` also
declines a row of several documents and padding before its document (one
length per row, counted from token 0). The domains say all of these
(``causal_windows_only`` for the window, ``one_sequence_a_row`` for
:class:`Lengths`), so the draws land inside them; the hooks decline the same
for a direct call.

Conventions mapped:

- the window: W = left + 1 (cuDNN's left bound is exclusive); under a causal
  kind the right side is moot and goes as 0; a right side 0 without a causal
  term goes as the causal term (positions from 0: the same keys). cuDNN's
  window bounds the left side only: handed W alone under a padding mask, as
  jax.nn does for ``local_window_size=(L, 0)`` without ``is_causal``, it let
  query i attend every key from i - L on (H100, jax 0.11.2, cuDNN 9.19), where
  jax.nn's docstring promises ``[i - L, i]``; a bug of JAX, docs/findings/
  jax-cudnn-window-without-causal.md (``right_by_causal = False`` hands it
  over as jax.nn does).
- a query that attends nothing (padding, a document without keys, a window
  past the last key): cuDNN writes nothing documented there; the module finds
  those queries from the arguments it passed (spans, causal, W) and writes o = 0,
  lse = -inf, inside the differentiated function.
- gradients cuDNN leaves unwritten: dq of a query that attends nothing and dk,
  dv of a key that no query attends (a token outside every span; the last keys
  of a causal span with more keys than queries) came back NaN, or another
  number on each call, on an H100. Neither JAX's docstrings nor cuDNN's say
  what is written there; the module writes 0, the gradient of a token that
  changes no output (``zero_unwritten``).
- lse: :class:`Lengths` gets ``[B, Tq, Hq]`` from jax.nn in the input dtype
  (``lse_dtype = "input"``); :class:`Packed` gets cuDNN's softmax statistics,
  float32 ``[B*M, Hq, T]`` indexed by compacted sequence and token within it,
  and reads each token's lse there.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from . import StackUnavailable, require
from ._jax_common import check_attention, lengths_reason, outputs, rows, sequence_lengths, tensors, with_vjp
from .. import packing
from attn_oracle import Domain
from attn_oracle.domain import TOP_LEFT_KINDS, is_causal

jax = require("JAX cuDNN attention", "jax", "jax", checked=("0.12",))
import jax.numpy as jnp  # noqa: E402
from jax._src.cudnn import fused_attention_stablehlo as fused  # noqa: E402
from jax._src.interpreters import mlir  # noqa: E402

__all__ = ["Lengths", "Packed", "unavailable_reason"]

HEAD_DIMS = (8, 64, 128)


def unavailable_reason() -> str | None:
    """Why JAX cannot run cuDNN's fused attention here, or None."""
    platform = jax.default_backend()
    if platform != "gpu" and fused._dot_product_attention_fwd_p not in mlir._platform_specific_lowerings.get(platform, {}):
        return f"no GPU: JAX's backend is {platform}, and cuDNN's fused attention lowers for CUDA only"
    try:
        fused.check_cudnn_version()
    except Exception as e:  # noqa: BLE001 - one line: why not
        return f"JAX finds no cuDNN ({type(e).__name__}: {e})"
    return None


if (_reason := unavailable_reason()) is not None:
    raise StackUnavailable(f"JAX cuDNN attention: {_reason}")


def cudnn_window(window, causal: bool, exclusive: bool = True, right_by_causal: bool = True):
    """(causal, W or None) for the suite's window, or None where cuDNN has no such window.
    ``exclusive``: cuDNN's left bound is exclusive, so W = left + 1 (False: a planted twin's W = left).
    ``right_by_causal``: a right side 0 goes as the causal term, since cuDNN's window bounds the left side
    only (False: as jax.nn hands it over, W without a causal term)."""
    left, right = (int(w) for w in window)
    if causal:
        right = 0  # moot under a causal term
    if left < 0 and right < 0:
        return causal, None
    if right != 0:
        return None
    return (True, None) if left < 0 else (causal or right_by_causal, left + exclusive)


def attended_keys(q_len, kv_len, j, causal):
    """[..., S] bool: whether key index j (< kv_len) is attended by a query (a window W >= 1 keeps j = i)."""
    return (j < kv_len) & (q_len > 0) & ((j < q_len) if causal else True)


def attends_something(q_len, kv_len, t, causal, w):
    """[..., T] bool: whether token index t (< q_len) of a sequence attends a key of kv_len keys."""
    first = np.maximum(0, t - w + 1) if w is not None else np.zeros_like(t)
    last = np.minimum(t, kv_len - 1) if (causal or w is not None) else kv_len - 1
    return (t < q_len) & (kv_len > 0) & (first <= last)


def _written(grads, q_keep, kv_keep):
    """dq = 0 where a query attends nothing, dk = dv = 0 where no query attends the key: cuDNN leaves
    those unwritten (NaN, or another number on each call, on an H100)."""
    dq, dk, dv = grads
    return tuple(jnp.where(keep[:, :, None, None], g, jnp.zeros_like(g))
                 for g, keep in ((dq, q_keep), (dk, kv_keep), (dv, kv_keep)))


def _finish(o, lse, keep):
    """o = 0 and lse = -inf where a query attends nothing; keep is [R, Tq]."""
    o = jnp.where(keep[:, :, None, None], o, jnp.zeros_like(o))
    return o, jnp.where(keep[:, :, None], lse.astype(jnp.float32), -jnp.inf)


def _run(forward, q, k, v, do, backward, keep, kv_keep):
    o, lse, grads = with_vjp(forward, q, k, v, do, backward)
    return o, lse, grads if grads is None or kv_keep is None else _written(grads, keep, kv_keep)


# scale is static: JAX's cuDNN call takes it as a Python float (a non-differentiable argument of its custom_vjp)
@partial(jax.jit, static_argnames=("scale", "causal", "window", "backward"))
def _lengths(q, k, v, do, q_len, kv_len, keep, kv_keep, *, scale, causal, window, backward):
    def forward(q, k, v):
        o, lse = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal, query_seq_lengths=q_len,
                                              key_value_seq_lengths=kv_len, local_window_size=window,
                                              implementation="cudnn", return_residual=True)
        return _finish(o, lse, keep)

    return _run(forward, q, k, v, do, backward, keep, kv_keep)


@partial(jax.jit, static_argnames=("scale", "causal", "window", "backward"))
def _packed(q, k, v, do, q_seqlen, kv_seqlen, q_offsets, kv_offsets, stat_index, keep, kv_keep, *, scale, causal,
            window, backward):
    mask_type = fused.MaskType.PADDING_CAUSAL if causal else fused.MaskType.PADDING

    def forward(q, k, v):
        o, stats = fused.dot_product_attention(q, k, v, q_seqlen=q_seqlen, kv_seqlen=kv_seqlen, q_offsets=q_offsets,
                                               kv_offsets=kv_offsets, scale=scale, mask_type=mask_type,
                                               qkv_layout="BTNH", sliding_window_length=window, return_residual=True)
        # stats [B*M, Hq, T]: token (r, t) is stats[sequence, :, index within it]
        lse = stats[stat_index[..., 0], :, stat_index[..., 1]]  # [R, Tq, Hq]
        return _finish(o, lse, keep)

    return _run(forward, q, k, v, do, backward, keep, kv_keep)


class _Base:
    version = jax.__version__
    exclusive_left = True  # False: a planted twin's window, W = left
    right_by_causal = True  # False: a window's right side 0 handed over as jax.nn does (W alone, no causal term)
    zero_unwritten = True  # False: the gradients cuDNN leaves unwritten come back as they are

    def _window(self, p):
        return cudnn_window(p.batch.window, is_causal(p.batch.mask), self.exclusive_left, self.right_by_causal)

    def unsupported_attention(self, p):
        if self._window(p) is None:
            return "a window with a right side and no causal term: cuDNN's window is (i - W, i]"
        return None


class Lengths(_Base):
    """One document per row, then padding: jax.nn's query_seq_lengths / key_value_seq_lengths on cuDNN."""

    name = "jax-cudnn-seq-lengths"
    lse_dtype = "input"  # jax.nn casts cuDNN's statistics to the output dtype
    domain = Domain(positions_from_zero=True, one_sequence_a_row=True, causal_windows_only=True,
                    mask_kinds=TOP_LEFT_KINDS, dtypes=("fp16", "bf16"), head_dims=HEAD_DIMS)

    def unsupported_attention(self, p):
        return lengths_reason(p.batch) or super().unsupported_attention(p)

    def attention(self, p, x):
        check_attention(self, p)
        q_ids, _, kv_ids, _ = rows(p.batch)
        q, k, v, do = tensors(p, x)
        q_len, kv_len = sequence_lengths(q_ids, kv_ids)
        causal, w = self._window(p)
        t = np.arange(q_ids.shape[1])[None, :]
        keep = attends_something(q_len[:, None], kv_len[:, None], t, causal, w)
        j = np.arange(kv_ids.shape[1])[None, :]
        kv_keep = attended_keys(q_len[:, None], kv_len[:, None], j, causal) if self.zero_unwritten else None
        window = None if w is None else (w - 1, 0)  # jax.nn hands cuDNN left + 1
        o, lse, grads = _lengths(q, k, v, do, jnp.asarray(q_len), jnp.asarray(kv_len), jnp.asarray(keep),
                                 None if kv_keep is None else jnp.asarray(kv_keep), scale=float(p.effective_scale),
                                 causal=causal, window=window, backward=p.backward)
        return outputs(p, o, lse, grads)


class Packed(_Base):
    """Packed rows: per-document q/kv lengths and offsets, cuDNN's THD path."""

    name = "jax-cudnn-packed"
    lse_dtype = "float32"  # cuDNN's softmax statistics, float32
    domain = Domain(positions_from_zero=True, causal_windows_only=True, mask_kinds=TOP_LEFT_KINDS,
                    dtypes=("fp16", "bf16"), head_dims=HEAD_DIMS)

    def spans(self, batch):
        """The documents handed to cuDNN: the reference's, with tokens on both sides."""
        return [d for d in packing.documents(batch) if d.q_len > 0 and d.kv_len > 0]

    def attention(self, p, x):
        check_attention(self, p)
        q_ids, _, kv_ids, _ = rows(p.batch)
        q, k, v, do = tensors(p, x)
        n_rows, tq, m = q_ids.shape[0], q_ids.shape[1], p.batch.max_segments
        causal, w = self._window(p)
        seqlen = {s: np.full((n_rows, m), -1, np.int32) for s in ("q", "kv")}
        offsets = {s: np.full((n_rows, m + 1), -1, np.int32) for s in ("q", "kv")}
        stat_index = np.zeros((n_rows, tq, 2), np.int32)
        keep = np.zeros((n_rows, tq), bool)
        kv_keep = np.zeros((n_rows, kv_ids.shape[1]), bool)
        used = np.zeros(n_rows, np.int64)
        sequence = 0  # cuDNN's compacted sequences, rows in order
        for d in self.spans(p.batch):
            slot = used[d.row]
            used[d.row] += 1
            for side, start, length in (("q", d.q_start, d.q_len), ("kv", d.kv_start, d.kv_len)):
                seqlen[side][d.row, slot], offsets[side][d.row, slot] = length, start
            t = np.arange(d.q_len)
            stat_index[d.row, d.q_start:d.q_start + d.q_len] = np.stack([np.full_like(t, sequence), t], -1)
            keep[d.row, d.q_start:d.q_start + d.q_len] = attends_something(d.q_len, d.kv_len, t, causal, w)
            kv_keep[d.row, d.kv_start:d.kv_start + d.kv_len] = attended_keys(d.q_len, d.kv_len, np.arange(d.kv_len),
                                                                             causal)
            sequence += 1
        o, lse, grads = _packed(q, k, v, do, *(jnp.asarray(a) for a in (seqlen["q"], seqlen["kv"], offsets["q"],
                                                                        offsets["kv"], stat_index, keep)),
                                jnp.asarray(kv_keep) if self.zero_unwritten else None,
                                scale=float(p.effective_scale), causal=causal, window=w, backward=p.backward)
        return outputs(p, o, lse, grads)
