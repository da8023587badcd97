// document_sizes.cpp: see document_sizes.hpp.
#include "attn_oracle/cases/document_sizes.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline cases {

DocumentSizes document_sizes(const PackedBatch& batch) {
  DocumentSizes out;
  const auto layout = validate_shapes(batch);
  if (!layout) return out;
  const BatchLayout& l = layout.value();
  std::map<int64_t, std::pair<int64_t, int64_t>> tokens;  // id -> (q, kv)
  for (int64_t r = 0; r < l.rows(); ++r) {
    tokens.clear();
    const RowView q = side_row(batch.q, l.q_extra, l, r), kv = side_row(batch.kv, l.kv_extra, l, r);
    for (int64_t t = 0; t < q.len; ++t) ++tokens[q.ids[t]].first;
    for (int64_t t = 0; t < kv.len; ++t) ++tokens[kv.ids[t]].second;
    for (const auto& [id, n] : tokens)
      if (id != 0) {
        out.pairs += n.first * n.second;
        out.longest = std::max({out.longest, n.first, n.second});
        if (n.first > 0 && n.second > kTileEdgeKeys && n.second % kTileEdgeKeys == 1) ++out.one_key_past_a_tile;
      }
  }
  return out;
}

}  // namespace attn_oracle::cases
