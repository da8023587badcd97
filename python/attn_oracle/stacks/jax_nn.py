"""jax.nn.dot_product_attention (JAX 0.12), its XLA path on the default backend (a GPU where
there is one), two ways users pack batches.

- :class:`Backend`: packed rows. The segment mask (same id, the query not
  padding) goes in as ``mask``; the causal term is jax.nn's own ``is_causal``
  and the window its own ``local_window_size``. Both act on token indices, so
  the domain is self-attention with positions from 0 in every document, where an
  index difference inside a document is a position difference. Under
  self-attention every document has as many q as kv tokens, so the bottom-right
  kinds are the top-left ones and go in as ``is_causal`` too.
- :class:`Lengths`: one document per row followed by padding, through
  ``query_seq_lengths`` / ``key_value_seq_lengths`` (no mask tensor). q and kv
  may differ (cross-attention). Its domain says what one length a row cannot
  (``one_sequence_a_row``: several documents in a row, padding before the
  document, since the lengths count from token 0) and the bottom-right kinds
  (``is_causal`` is top-left and there is no bottom-right option), so the
  draws land inside it.

Conventions mapped:

- a query that attends nothing: jax.nn fills masked logits with -0.7 x the
  float32 maximum, so such a query gets the mean of its row's values (0 for a
  query past ``query_seq_lengths``, which jax.nn zeroes) and an lse near
  -2.4e38 (-inf in fp16, where the cast overflows). The module reads that lse
  off ``return_residual=True`` and writes o = 0, lse = -inf there; the output is
  zeroed inside the differentiated function, so nothing flows back through it.
- lse: ``return_residual=True`` gives it [R, Tq, Hq] in the input dtype
  (``lse_dtype = "input"``); it is transposed to [R, Hq, Tq].
- inputs are cast to the problem's dtype (fp32, bf16, fp16) before the call;
  jax.nn computes logits and softmax in float32, its probabilities in the input
  dtype.
- fp32 matmuls: the suite judges fp32 as fp32, while XLA's default precision on
  a GPU multiplies fp32 in TF32 (``jax.lax.Precision.DEFAULT``: "uses
  tensorfloat32 if available"); on an H100 that put o 12x over its fp32
  budget. jax.nn takes no precision argument, so an fp32 call runs under
  ``jax.default_matmul_precision("highest")``, as a user who wants fp32 asks
  for it. On a CPU this changes nothing.

Declined by both: fp16 on the CPU backend (under jax.jit, XLA:CPU refuses the
F16_F16_F32 preset jax.nn asks for; docs/stacks.md has the finding).

Invalid batches raise the reference's error code (jax.nn does not validate).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from . import require
from ._jax_common import (check, check_attention, empty_as_ours, highest_precision, lengths_reason, outputs,
                          rows, sequence_lengths, tensors, with_vjp)
from attn_oracle import Domain
from attn_oracle.domain import TOP_LEFT_KINDS, is_bottom_right, is_causal

jax = require("jax.nn", "jax", "jax", checked=("0.12",))
import jax.numpy as jnp  # noqa: E402

# fp16 on the CPU backend: under jax.jit, XLA:CPU refuses the F16_F16_F32 preset jax.nn asks
# dot_general for (python/tests/test_stack_jax_nn.py shows it); a GPU takes it.
DTYPES = ("fp32", "bf16") if jax.default_backend() == "cpu" else ("fp32", "bf16", "fp16")

__all__ = ["Backend", "Lengths"]


def _window(window, kind, tq, tkv):
    """jax.nn's local_window_size for our window: an unbounded side spans the whole row."""
    big = max(tq, tkv) + 1
    left, right = window
    if is_bottom_right(kind):
        right = -1  # the bottom-right kinds ignore the right side
    side = lambda v: big if v < 0 else min(v, big)  # noqa: E731
    return np.int32(side(left)), np.int32(side(right))


def _precision(dtype, highest: bool):
    """The matmul precision a call asks for: "highest" for fp32 (highest_precision), else XLA's default."""
    return jax.default_matmul_precision("highest" if highest_precision(dtype, highest) else None)


@partial(jax.jit, static_argnames=("causal", "backward", "map_empty", "highest"))
def _segments(q, k, v, do, q_ids, kv_ids, scale, window, *, causal, backward, map_empty=True, highest=True):
    mask = ((q_ids[:, :, None] == kv_ids[:, None, :]) & (q_ids != 0)[:, :, None])[:, None]  # [R, 1, Tq, Tkv]

    def forward(q, k, v):
        with _precision(q.dtype, highest):
            o, lse = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=causal,
                                                  local_window_size=window, implementation="xla",
                                                  return_residual=True)
        return empty_as_ours(o, lse) if map_empty else (o, lse.astype(jnp.float32))

    return with_vjp(forward, q, k, v, do, backward)


@partial(jax.jit, static_argnames=("causal", "backward", "map_empty", "highest"))
def _lengths(q, k, v, do, q_len, kv_len, scale, window, *, causal, backward, map_empty=True, highest=True):
    def forward(q, k, v):
        with _precision(q.dtype, highest):
            o, lse = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal, query_seq_lengths=q_len,
                                                  key_value_seq_lengths=kv_len, local_window_size=window,
                                                  implementation="xla", return_residual=True)
        return empty_as_ours(o, lse) if map_empty else (o, lse.astype(jnp.float32))

    return with_vjp(forward, q, k, v, do, backward)


class _Base:
    version = jax.__version__
    lse_dtype = "input"  # jax.nn returns its residual in the input dtype
    map_empty = True  # False: the stack's own answer for a query that attends nothing
    highest = True  # False: fp32 at XLA's default precision (TF32 on a GPU)


class Backend(_Base):
    """Packed rows: segment mask + jax.nn's is_causal and local_window_size."""

    name = "jax.nn-segments"
    domain = Domain(self_attention_only=True, positions_from_zero=True, dtypes=DTYPES)

    def attention(self, p, x):
        check(p.batch)
        q_ids, _, kv_ids, _ = rows(p.batch)
        q, k, v, do = tensors(p, x)
        window = _window(p.batch.window, p.batch.mask, q_ids.shape[1], kv_ids.shape[1])
        o, lse, grads = _segments(q, k, v, do, jnp.asarray(q_ids, jnp.int32), jnp.asarray(kv_ids, jnp.int32),
                                  np.float32(p.effective_scale), window, causal=is_causal(p.batch.mask),
                                  backward=p.backward, map_empty=self.map_empty, highest=self.highest)
        return outputs(p, o, lse, grads)


class Lengths(_Base):
    """One document per row, then padding: query_seq_lengths / key_value_seq_lengths."""

    name = "jax.nn-seq-lengths"
    # One length a row: one sequence a row, from token 0 (the hook below says the same for a direct call).
    domain = Domain(positions_from_zero=True, one_sequence_a_row=True,
                    mask_kinds=TOP_LEFT_KINDS, dtypes=DTYPES)

    def unsupported_attention(self, p):
        return lengths_reason(p.batch)

    def attention(self, p, x):
        check_attention(self, p)
        q_ids, _, kv_ids, _ = rows(p.batch)
        q, k, v, do = tensors(p, x)
        q_len, kv_len = sequence_lengths(q_ids, kv_ids)
        window = _window(p.batch.window, p.batch.mask, q_ids.shape[1], kv_ids.shape[1])
        o, lse, grads = _lengths(q, k, v, do, jnp.asarray(q_len), jnp.asarray(kv_len), np.float32(p.effective_scale),
                                 window, causal=is_causal(p.batch.mask), backward=p.backward, map_empty=self.map_empty,
                                 highest=self.highest)
        return outputs(p, o, lse, grads)
