// judging.cpp: the verdict steps the ops' judge() share (judging.hpp).
#include "judging.hpp"

#include <algorithm>

#include "attn_oracle/cases/document_sizes.hpp"

namespace attn_oracle {

Evaluation Evaluation::missing(const Backend& backend, Capability capability) {
  return Evaluation{Kind::missing_capability, nullptr, missing_capability(backend, capability)};
}

std::string missing_capability(const Backend& backend, Capability capability) {
  return "backend " + backend.name() + " lacks the " + std::string(to_string(capability)) + " capability";
}

void judge_tolerance(const std::vector<ToleranceCheck>& checks, Judgement& j) {
  for (const ToleranceCheck& t : checks)
    if (!t.pass) j.fail(t.describe());
  for (const ToleranceCheck& t : checks)
    if (t.pass) j.note(t.describe());
}

CoverageCell batch_coverage(const PackedBatch& b) {
  CoverageCell cell{std::string(to_string(b.mask)), {}, {}};
  const Shape& q = b.q.segment_ids.shape;
  const Shape& kv = b.kv.segment_ids.shape;
  if (q.size() >= 2) cell.layouts.insert(q[q.size() - 2] == 1 ? "B=1" : "B>1");
  if (q.size() > 2 || kv.size() > 2) cell.layouts.insert("extra dims");
  if (!q.empty() && !kv.empty() && q.back() != kv.back()) cell.layouts.insert("Tq!=Tkv");
  if (b.window.left >= 0 || b.window.right >= 0) cell.layouts.insert("window");
  // Where GPU kernels tile past one 256-row or -key tile (generators.hpp, the kernel-tile mode).
  if (document_sizes(b).longest >= kLongDocMin) cell.layouts.insert("document>=256");
  return cell;
}

CaseSize batch_size(const PackedBatch& b) {
  CaseSize size;
  const Shape& q = b.q.segment_ids.shape;
  const Shape& kv = b.kv.segment_ids.shape;
  if (q.size() < 2 || kv.size() < 2) return size;
  size.rows = shape_product(Shape(q.begin(), q.end() - 1));
  size.tokens = std::max(q.back(), kv.back());
  return size;
}

void add_shape_coverage(const AttentionShape& s, CoverageCell& cell) {
  if (s.heads_q != s.heads_kv) cell.layouts.insert("GQA");
  if (s.heads_kv > 0 && s.heads_q > 4 * s.heads_kv) cell.layouts.insert("GQA>4");
  cell.dtypes.insert(std::string(to_string(s.dtype)) + (s.backward ? " fwd+bwd" : " fwd"));
}

}  // namespace attn_oracle
