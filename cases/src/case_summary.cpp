// case_summary.cpp: see case_summary.hpp.
#include "attn_oracle/cases/case_summary.hpp"

#include <sstream>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_op.hpp"

namespace attn_oracle::inline cases {
namespace {

std::string ints(const IntArray& a) {
  const int64_t len = a.shape.empty() ? 0 : a.shape.back();
  std::string out = "[";
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (len > 0 && i % len == 0) out += (i ? "], [" : "[");
    else out += ", ";
    out += std::to_string(a.data[i]);
  }
  return out + (a.data.empty() ? "]" : "]]");
}

std::string batch_line(const PackedBatch& b) {
  std::string out = std::string(to_string(b.mask));
  if (b.window.left >= 0 || b.window.right >= 0)
    out += " window (" + std::to_string(b.window.left) + ", " + std::to_string(b.window.right) + ")";
  out += " M=" + std::to_string(b.max_segments);
  const bool self = b.q == b.kv;
  out += " | " + std::string(self ? "q = kv" : "q") + " ids " + ints(b.q.segment_ids) + " pos " + ints(b.q.segment_pos);
  if (!self) out += " | kv ids " + ints(b.kv.segment_ids) + " pos " + ints(b.kv.segment_pos);
  return out;
}

std::string shape_line(const AttentionCase& a) {
  const AttentionShape& s = a.problem.shape;
  std::ostringstream os;
  os << to_string(s.dtype) << ", heads " << s.heads_q << "/" << s.heads_kv << ", head_dim " << s.head_dim;
  if (s.scale) os << ", scale " << *s.scale;
  os << (s.backward ? ", forward and backward" : ", forward");
  os << (a.data_seed ? ", data seed " + std::to_string(*a.data_seed) : std::string(", explicit tensors"));
  return os.str();
}

}  // namespace

std::string case_summary(const Case& c) {
  const std::string op(op_of(c).name());
  if (const auto* m = c.as<MetadataCase>()) return op + " " + batch_line(m->batch);
  if (const AttentionCase* a = attention_fields(c.payload); a && !c.as<ShardingCase>() && !c.as<ContextParallelCase>())
    return op + " " + batch_line(a->problem.batch) + "\n" + shape_line(*a);
  if (const auto* kv = c.as<KvBufferCase>()) {
    std::string lengths;
    for (int64_t l : kv->problem.doc_lengths) lengths += (lengths.empty() ? "" : ", ") + std::to_string(l);
    const AttentionShape& s = kv->problem.shape;
    return op + " doc_lengths [" + lengths + "], micro_seq_tokens " + std::to_string(kv->problem.micro_seq_tokens) +
           "\n" + std::string(to_string(s.dtype)) + ", heads " + std::to_string(s.heads_q) + "/" +
           std::to_string(s.heads_kv) + ", head_dim " + std::to_string(s.head_dim) +
           (s.backward ? ", forward and backward" : ", forward");
  }
  return op + " (its fields are in the file)";
}

std::vector<std::string> case_summary_lines(const std::string& path) {
  const Expected<Case> c = read_case_file(path);
  if (!c) return {"(cannot read the case: " + c.error().message + ")"};
  std::vector<std::string> out;
  std::istringstream lines(case_summary(c.value()));
  for (std::string line; std::getline(lines, line);) out.push_back(line);
  return out;
}

}  // namespace attn_oracle::cases
