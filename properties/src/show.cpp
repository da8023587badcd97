// show.cpp: how counterexamples print. Ids and positions row by row with the
// shapes, never float tensors, so a shrunk case reads at a glance.
#include <sstream>

#include "attn_oracle/properties/generators.hpp"

namespace attn_oracle::inline properties {
namespace {

void show_rows(const IntArray& a, std::ostream& os) {
  const int64_t len = a.shape.empty() ? 0 : a.shape.back();
  os << shape_to_string(a.shape);
  if (len <= 0 || a.data.empty()) return;
  for (size_t r = 0; r * len < a.data.size(); ++r) {
    os << (r ? " | " : " ");
    for (int64_t t = 0; t < len; ++t) os << (t ? "," : "") << a.data[r * len + t];
  }
}

}  // namespace

void showValue(const PackedBatch& b, std::ostream& os) {
  os << "mask=" << to_string(b.mask) << " window=(" << b.window.left << "," << b.window.right
     << ") M=" << b.max_segments << "\n  q ids  ";
  show_rows(b.q.segment_ids, os);
  os << "\n  q pos  ";
  show_rows(b.q.segment_pos, os);
  os << "\n  kv ids ";
  show_rows(b.kv.segment_ids, os);
  os << "\n  kv pos ";
  show_rows(b.kv.segment_pos, os);
}

void showValue(const InvalidBatch& d, std::ostream& os) {
  os << "expects " << to_string(d.expected) << ": ";
  showValue(d.batch, os);
}

void showValue(const AttentionDraw& d, std::ostream& os) {
  const AttentionShape& s = d.problem.shape;
  os << "heads_q=" << s.heads_q << " heads_kv=" << s.heads_kv << " head_dim=" << s.head_dim
     << " dtype=" << to_string(s.dtype) << " backward=" << s.backward << " seed=" << d.seed << ": ";
  showValue(d.problem.batch, os);
}

}  // namespace attn_oracle::properties
