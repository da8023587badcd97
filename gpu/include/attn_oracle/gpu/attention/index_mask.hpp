// index_mask.hpp: the rule the kernels apply inside one document, by index
// (DESIGN section 4, "representability"): query a of lq may attend key b of lkv
//   top-left causal:  b <= a                   window: a - left <= b <= a + right
//   bottom-right:     b <= a + (lkv - lq)      window: b >= a + (lkv - lq) - left
//   no_mask/padding:  all b                    window as top-left
// For every query the allowed keys form one interval [lo, hi] whose ends never
// decrease with a; tile ranges (tile_range.hpp) rely on that.
// Written independently of the reference's kernel_rule_allows; the properties
// compare the two through the outputs.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

struct KeyInterval {
  int64_t lo, hi;  // inclusive, clipped to [0, lkv - 1]; empty when lo > hi
};

// Mask codes as in metadata_row.hpp: 2, 3 top-left causal; 4, 5 bottom-right.
ATTN_HD bool rule_top_left(int mask) { return mask == 2 || mask == 3; }
ATTN_HD bool rule_bottom_right(int mask) { return mask == 4 || mask == 5; }

ATTN_HD KeyInterval key_interval(int mask, int64_t left, int64_t right, int64_t a, int64_t lq, int64_t lkv) {
  int64_t lo = 0, hi = lkv - 1;
  if (rule_bottom_right(mask)) {
    const int64_t diagonal = a + (lkv - lq);
    hi = hi < diagonal ? hi : diagonal;
    if (left >= 0) lo = lo > diagonal - left ? lo : diagonal - left;
    return KeyInterval{lo, hi};
  }
  if (rule_top_left(mask)) hi = hi < a ? hi : a;
  if (left >= 0) lo = lo > a - left ? lo : a - left;
  if (right >= 0) hi = hi < a + right ? hi : a + right;
  return KeyInterval{lo, hi};
}

ATTN_HD bool index_allowed(int mask, int64_t left, int64_t right, int64_t a, int64_t b, int64_t lq, int64_t lkv) {
  const KeyInterval k = key_interval(mask, left, right, a, lq, lkv);
  return b >= k.lo && b <= k.hi;
}

}  // namespace attn_oracle::gpu
