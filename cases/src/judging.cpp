// judging.cpp: the verdict steps the ops' judge() share (judging.hpp).
#include "judging.hpp"

#include <algorithm>

#include "attn_oracle/cases/document_sizes.hpp"

namespace attn_oracle::inline cases {
namespace {

// "[1, 0, 2]" for flat index 5 of shape [2, 2, 3].
std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    index[k] = shape[k] > 0 ? flat % shape[k] : 0;
    flat = shape[k] > 0 ? flat / shape[k] : 0;
  }
  return shape_to_string(index);
}

void compare_field(const std::string& name, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                   const Shape& shape, Judgement& j) {
  if (got.size() != want.size())
    return j.fail(std::string(name) + ": backend has " + std::to_string(got.size()) + " entries, reference " +
                  std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      j.fail(name + (shape.empty() ? "" : index_string(int64_t(i), shape)) + ": backend " + std::to_string(got[i]) +
             ", reference " + std::to_string(want[i]));
}

}  // namespace

void compare_metadata(const Metadata& got, const Metadata& want, Judgement& j, const std::string& prefix) {
  if (got.extra != want.extra || got.batch != want.batch || got.max_segments != want.max_segments)
    return j.fail(prefix + "shape (extra, B, M): backend " + shape_to_string(got.extra) + ", " + std::to_string(got.batch) +
                  ", " + std::to_string(got.max_segments) + "; reference " + shape_to_string(want.extra) + ", " +
                  std::to_string(want.batch) + ", " + std::to_string(want.max_segments));
  Shape seqlens = want.extra, offsets = want.extra;
  seqlens.insert(seqlens.end(), {want.batch, want.max_segments});
  offsets.insert(offsets.end(), {want.batch, want.max_segments + 1});
  const Shape flat = {int64_t(want.cu_seqlens_q.size())};
  compare_field(prefix + "q_seqlens", got.q_seqlens, want.q_seqlens, seqlens, j);
  compare_field(prefix + "kv_seqlens", got.kv_seqlens, want.kv_seqlens, seqlens, j);
  compare_field(prefix + "q_offsets", got.q_offsets, want.q_offsets, offsets, j);
  compare_field(prefix + "kv_offsets", got.kv_offsets, want.kv_offsets, offsets, j);
  compare_field(prefix + "cu_seqlens_q", got.cu_seqlens_q, want.cu_seqlens_q, flat, j);
  compare_field(prefix + "cu_seqlens_kv", got.cu_seqlens_kv, want.cu_seqlens_kv, flat, j);
  compare_field(prefix + "ragged_offsets_q", got.ragged_offsets_q, want.ragged_offsets_q, flat, j);
  compare_field(prefix + "ragged_offsets_kv", got.ragged_offsets_kv, want.ragged_offsets_kv, flat, j);
  for (const auto& [name, g, w] : returned_optional_fields(got, want))
    compare_field(prefix + name, g, w, name[0] == 'm' ? Shape{} : Shape{int64_t(w.size())}, j);
  if (j.passed()) j.note(prefix + "metadata: every field equal");
}


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

void add_tile_edge_coverage(const AttentionProblem& p, CoverageCell& cell) {
  if (p.shape.head_dim >= 64 && document_sizes(p.batch).one_key_past_a_tile > 0)
    cell.layouts.insert("keys 64k+1, head_dim>=64");
}

void add_shape_coverage(const AttentionShape& s, CoverageCell& cell) {
  if (s.heads_q != s.heads_kv) cell.layouts.insert("GQA");
  if (s.heads_kv > 0 && s.heads_q > 4 * s.heads_kv) cell.layouts.insert("GQA>4");
  cell.dtypes.insert(std::string(to_string(s.dtype)) + (s.backward ? " fwd+bwd" : " fwd"));
}

}  // namespace attn_oracle::cases
