// cudnn_band.hpp: the mask kinds and window of docs/semantics.md#2-the-attention-mask, as the
// kernels' index rule applies them to trimmed runs
// (docs/semantics.md#the-kernels-index-rule-and-representability), turned into cuDNN SDPA's
// diagonal band: an alignment and optional left / right bounds.
//
// cuDNN's band, for query row r and key column c of one sequence, with
// shift = (s_kv - s_q) when the diagonal is bottom-right aligned and 0 when top-left:
//   right bound R keeps  c <= r + shift + R      (inclusive, like our window's `right`)
//   left bound L keeps   c >  r + shift - L      (EXCLUSIVE: L keys up to the diagonal)
// Our window (docs/semantics.md#2-the-attention-mask) keeps pos_kv >= pos_q - left, the boundary
// included, so a left window of `left` is cuDNN's left bound left + 1 (left = 0 keeps the diagonal
// alone, left bound 1; cuDNN rejects left bounds <= 0).
// Causal kinds are right bound 0 on their alignment; a window's right side under a
// causal kind is already implied (top-left) or ignored (bottom-right,
// docs/semantics.md#2-the-attention-mask).
//
// Checked on the CPU by tests/cudnn_backend_rules_test.cpp: cudnn_band_keeps equals
// gpu::index_allowed for every mask kind, window and (row, column) of small runs.
#pragma once

#include <climits>
#include <cstdint>
#include <optional>

#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline backends::cudnn {

struct Band {
  bool bottom_right = false;          // DiagonalAlignment_t::BOTTOM_RIGHT, else TOP_LEFT
  std::optional<int64_t> left_bound;  // cuDNN's exclusive left bound (>= 1)
  std::optional<int64_t> right_bound; // cuDNN's inclusive right bound (>= 0)
};

// The band for a mask kind and one of our windows. A left window past INT_MAX - 1 keys
// is dropped: no run is that long, and cuDNN takes the bound as an int.
inline Band band_for(MaskKind mask, const Window& window) {
  Band band;
  band.bottom_right = attn_oracle::is_bottom_right(mask);
  if (attn_oracle::is_causal(mask)) band.right_bound = 0;
  else if (window.right >= 0 && window.right <= INT_MAX) band.right_bound = window.right;
  if (window.left >= 0 && window.left < INT_MAX) band.left_bound = window.left + 1;
  return band;
}

// cuDNN's rule for row r < s_q and column c < s_kv of one sequence, as documented
// (the reference graph its frontend builds for the band: two comparisons).
inline bool cudnn_band_keeps(const Band& band, int64_t r, int64_t c, int64_t s_q, int64_t s_kv) {
  const int64_t shift = band.bottom_right ? s_kv - s_q : 0;
  if (band.right_bound && !(c <= r + shift + *band.right_bound)) return false;
  if (band.left_bound && !(c > r + shift - *band.left_bound)) return false;
  return true;
}

}  // namespace attn_oracle::backends::cudnn
