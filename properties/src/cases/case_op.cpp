// case_op.cpp: Evaluation and Judgement (case_op.hpp), and the verdict steps the
// ops' judge() share (judging.hpp).
#include "attn_oracle/case_op.hpp"

#include "cases/judging.hpp"

#include <algorithm>

#include "attn_oracle/document_sizes.hpp"
#include "attn_oracle/generators.hpp"  // kLongDocMin only: case_op links no generator

namespace attn_oracle {

Evaluation Evaluation::of(const Expected<nlohmann::json>& r) {
  if (r) return Evaluation{Kind::result, r.value(), ""};
  return Evaluation{Kind::rejected, error_to_json(r.error()), ""};
}

Evaluation Evaluation::declined_because(const std::string& reason) {
  return Evaluation{Kind::declined, error_to_json(Error{ErrorCode::unsupported, reason}), reason};
}

Evaluation Evaluation::missing(const Backend& backend, Capability capability) {
  return Evaluation{Kind::missing_capability, nullptr, missing_capability(backend, capability)};
}

void Judgement::fail(const std::string& line) {
  status = Status::fail;
  // failures first: insert after the last failure line
  lines.insert(lines.begin() + failures_++, line);
}

void Judgement::note(const std::string& line) { lines.push_back(line); }

void Judgement::skip(const std::string& reason) {
  if (status == Status::pass) status = Status::skip;
  lines.push_back(reason);
}

void Judgement::merge(const Judgement& other) {
  for (size_t i = 0; i < other.lines.size(); ++i) {
    if (i < other.failures_) fail(other.lines[i]);
    else lines.push_back(other.lines[i]);
  }
  if (other.status == Status::skip && status == Status::pass) status = Status::skip;
}

std::string_view to_string(Judgement::Status status) {
  switch (status) {
    case Judgement::Status::pass: return "PASS";
    case Judgement::Status::fail: return "FAIL";
    case Judgement::Status::skip: return "SKIP";
  }
  return "?";
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
