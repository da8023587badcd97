"""Planted twins of the JAX stack modules (python/attn_oracle/stacks), one
realistic mapping mistake each, that `check` must catch and shrink:

- JaxNnUnmapped: jax.nn's answer for a query that attends nothing passed on as
  it comes (the mean of the row's values and an lse near -2.4e38), the mapping
  to o = 0, lse = -inf left out;
- FlaxUnmapped: the same in Flax (the mean of the row's values);
- MaxTextPaddingUnmapped: MaxText's padding treated as no document, though
  MaxText lets padding queries attend padding keys (their output is kept);
- TeJaxSlotOffsets: TE's per-row offsets read as slot-indexed (offset k of
  document k+1), as seqlens are: the compacted offsets of a row whose first
  document has no valid tokens shift one slot.
"""
import importlib.util

import numpy as np

from attn_oracle.domain import TOP_LEFT_KINDS
from attn_oracle.stacks import flax_attention, jax_nn, te_jax

if importlib.util.find_spec("maxtext") is not None:
    from attn_oracle.stacks import maxtext
else:  # the MaxText twin is defined only where MaxText is installed
    maxtext = None


class JaxNnUnmapped(jax_nn.Backend):
    name = "jax.nn-segments-unmapped"
    map_empty = False


class FlaxUnmapped(flax_attention.Backend):
    name = "flax-unmapped"
    map_empty = False


class TeJaxSlotOffsets(te_jax.Backend):
    name = "transformer-engine-jax-slot-offsets"

    def metadata(self, b):
        out = super().metadata(b)
        for side in ("q", "kv"):
            seqlens, offsets = out[f"{side}_seqlens"], out[f"{side}_offsets"]
            slotted = np.full_like(offsets, -1)
            flat_l, flat_o, flat_s = (a.reshape(-1, a.shape[-1]) for a in (seqlens, offsets, slotted))
            for r in range(len(flat_l)):
                used = np.flatnonzero(flat_l[r] > 0)
                flat_s[r, used] = flat_o[r, : len(used)]
            out[f"{side}_offsets"] = flat_s.reshape(offsets.shape)
        return out


class MaxTextPaddingUnmapped(maxtext.Backend if maxtext else object):
    """MaxText's padding-as-a-segment convention left unmapped: padding queries keep what they attend."""

    name = "maxtext-padding-unmapped"
    map_padding = False


class TeJaxWithoutBottomRight(te_jax.Backend):
    """Not a twin: TE's metadata on the four kinds its bottom-right finding leaves alone (the test's passing run)."""

    name = "transformer-engine-jax-metadata-top-left"
    domain = te_jax.Domain(mask_kinds=TOP_LEFT_KINDS)


class FlaxFp16(flax_attention.Backend):
    """Not a twin: Flax on fp16 draws only (the test that fp16 is taken)."""

    name = "flax-fp16"
    domain = flax_attention.Domain(mask_kinds=flax_attention.Backend.domain.mask_kinds, dtypes=("fp16",),
                                   max_position=flax_attention.Backend.domain.max_position)


class MaxTextFp16(maxtext.Backend if maxtext else object):
    """Not a twin: MaxText on fp16 draws only (the test that fp16 is taken)."""

    name = "maxtext-fp16"
    domain = flax_attention.Domain(self_attention_only=True, positions_from_zero=True, windows=False, dtypes=("fp16",))
