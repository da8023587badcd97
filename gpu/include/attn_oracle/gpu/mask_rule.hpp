// mask_rule.hpp: the mask kinds as the kernels see them, and the one place the
// production code spells docs/semantics.md#2-the-attention-mask's causal and window terms.
//
// allowed_interval(mask, left, right, a, lq, lkv) gives the keys b that query a
// may attend, in coordinates where the query's run has lq tokens and the key's
// lkv (unclipped; "unbounded" ends are kUnboundedLo / kUnboundedHi):
//   top-left causal:  b <= a                   window: a - left <= b <= a + right
//   bottom-right:     b <= a + (lkv - lq)      window: b >= a + (lkv - lq) - left
//   no_mask/padding:  every b                  window as top-left
// The attention kernels apply it to indices inside a document's trimmed runs
// (index_mask.hpp clips it to [0, lkv - 1]); the small-seq kernel to positions,
// with the query's run of length 1 (small_seq_rows.hpp). Written independently
// of the reference; tests/attention_tiles_test.cpp compares the two pair by pair.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

// Mirrors attn_oracle::MaskKind (checked by static_asserts in the twins).
enum MaskCode : int { kNoMask, kPadding, kCausal, kPaddingCausal, kCausalBottomRight, kPaddingCausalBottomRight };

ATTN_HD bool mask_allows_padding(int m) { return m == kPadding || m == kPaddingCausal || m == kPaddingCausalBottomRight; }
ATTN_HD bool mask_top_left(int m) { return m == kCausal || m == kPaddingCausal; }
ATTN_HD bool mask_bottom_right(int m) { return m == kCausalBottomRight || m == kPaddingCausalBottomRight; }

inline constexpr int64_t kUnboundedLo = INT64_MIN, kUnboundedHi = INT64_MAX;

// x + y clamped to the int64 range. Positions reach INT64_MAX and a window
// side can be "unbounded" written as a huge number (sys.maxsize): the sums of
// the rule saturate there instead of wrapping, which reads the same as an
// unbounded end.
ATTN_HD int64_t saturating_add(int64_t x, int64_t y) {
  if (y > 0 && x > kUnboundedHi - y) return kUnboundedHi;
  if (y < 0 && x < kUnboundedLo - y) return kUnboundedLo;
  return x + y;
}

struct KeyInterval {
  int64_t lo, hi;  // inclusive; empty when lo > hi
};

ATTN_HD KeyInterval allowed_interval(int mask, int64_t left, int64_t right, int64_t a, int64_t lq, int64_t lkv) {
  if (mask_bottom_right(mask)) {
    const int64_t diagonal = saturating_add(a, lkv - lq);
    return KeyInterval{left >= 0 ? saturating_add(diagonal, -left) : kUnboundedLo, diagonal};
  }
  KeyInterval k{kUnboundedLo, mask_top_left(mask) ? a : kUnboundedHi};
  if (left >= 0) k.lo = saturating_add(a, -left);
  if (right >= 0 && saturating_add(a, right) < k.hi) k.hi = saturating_add(a, right);
  return k;
}

ATTN_HD bool rule_allows(int mask, int64_t left, int64_t right, int64_t a, int64_t b, int64_t lq, int64_t lkv) {
  const KeyInterval k = allowed_interval(mask, left, right, a, lq, lkv);
  return b >= k.lo && b <= k.hi;
}

}  // namespace attn_oracle::gpu
