// index_mask.hpp: the rule the attention kernels apply inside one document, by
// index (docs/semantics.md#the-kernels-index-rule-and-representability, "representability"):
// mask_rule.hpp's interval for query a of lq against keys of lkv, clipped to the keys that exist.
// For every query the allowed keys form one interval [lo, hi] whose ends never decrease
// with a; tile ranges (tile_range.hpp) rely on that.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"
#include "attn_oracle/gpu/mask_rule.hpp"

namespace attn_oracle::gpu {

// Clipped to [0, lkv - 1]; empty when lo > hi.
ATTN_HD KeyInterval key_interval(int mask, int64_t left, int64_t right, int64_t a, int64_t lq, int64_t lkv) {
  KeyInterval k = allowed_interval(mask, left, right, a, lq, lkv);
  if (k.lo < 0) k.lo = 0;
  if (k.hi > lkv - 1) k.hi = lkv - 1;
  return k;
}

ATTN_HD bool index_allowed(int mask, int64_t left, int64_t right, int64_t a, int64_t b, int64_t lq, int64_t lkv) {
  return b >= 0 && b < lkv && rule_allows(mask, left, right, a, b, lq, lkv);
}

}  // namespace attn_oracle::gpu
