// metadata_case.cpp: the `metadata` op (metadata_case.hpp): its fields, its
// evaluation on a backend's metadata capability, its judgement (every integer
// and the error code exactly, against ref::metadata) and its coverage.
// Tested by tests/case_file_test.cpp, tests/fixtures_test.cpp and tests/cli_test.cpp.
#include "attn_oracle/cases/metadata_case.hpp"

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle {
namespace {

using nlohmann::json;

// "[1, 0, 2]" for flat index 5 of shape [2, 2, 3].
std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    index[k] = shape[k] > 0 ? flat % shape[k] : 0;
    flat = shape[k] > 0 ? flat / shape[k] : 0;
  }
  return shape_to_string(index);
}

void compare_field(const char* name, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                   const Shape& shape, Judgement& j) {
  if (got.size() != want.size())
    return j.fail(std::string(name) + ": backend has " + std::to_string(got.size()) + " entries, reference " +
                  std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      j.fail(std::string(name) + (shape.empty() ? "" : index_string(int64_t(i), shape)) + ": backend " + std::to_string(got[i]) +
             ", reference " + std::to_string(want[i]));
}

void compare_metadata(const Metadata& got, const Metadata& want, Judgement& j) {
  if (got.extra != want.extra || got.batch != want.batch || got.max_segments != want.max_segments)
    return j.fail("shape (extra, B, M): backend " + shape_to_string(got.extra) + ", " + std::to_string(got.batch) +
                  ", " + std::to_string(got.max_segments) + "; reference " + shape_to_string(want.extra) + ", " +
                  std::to_string(want.batch) + ", " + std::to_string(want.max_segments));
  Shape seqlens = want.extra, offsets = want.extra;
  seqlens.insert(seqlens.end(), {want.batch, want.max_segments});
  offsets.insert(offsets.end(), {want.batch, want.max_segments + 1});
  const Shape flat = {int64_t(want.cu_seqlens_q.size())};
  compare_field("q_seqlens", got.q_seqlens, want.q_seqlens, seqlens, j);
  compare_field("kv_seqlens", got.kv_seqlens, want.kv_seqlens, seqlens, j);
  compare_field("q_offsets", got.q_offsets, want.q_offsets, offsets, j);
  compare_field("kv_offsets", got.kv_offsets, want.kv_offsets, offsets, j);
  compare_field("cu_seqlens_q", got.cu_seqlens_q, want.cu_seqlens_q, flat, j);
  compare_field("cu_seqlens_kv", got.cu_seqlens_kv, want.cu_seqlens_kv, flat, j);
  compare_field("ragged_offsets_q", got.ragged_offsets_q, want.ragged_offsets_q, flat, j);
  compare_field("ragged_offsets_kv", got.ragged_offsets_kv, want.ragged_offsets_kv, flat, j);
  for (const auto& [name, g, w] : returned_optional_fields(got, want))
    compare_field(name, g, w, name[0] == 'm' ? Shape{} : Shape{int64_t(w.size())}, j);
  if (j.passed()) j.note("metadata: every field equal");
}

class MetadataOp final : public TypedCaseOp<MetadataCase> {
 public:
  std::string_view name() const override { return "metadata"; }
  Capability capability() const override { return Capability::metadata; }

  CasePayload read(const json& j) const override {
    case_json::reject_unknown_keys(j, case_json::batch_keys());
    return MetadataCase{case_json::parse_batch(j)};
  }

 protected:
  json write_fields(const MetadataCase& c) const override { return case_json::batch_to_json(c.batch); }

  Evaluation evaluate_on(Backend& backend, const MetadataCase& c) const override {
    if (!backend.metadata()) return Evaluation::missing(backend, capability());
    if (auto reason = backend.metadata()->unsupported(c.batch))
      return Evaluation::declined_because("backend " + backend.name() + " does not support this input: " + *reason);
    const Expected<Metadata> md = backend.metadata()->metadata(c.batch);
    if (!md) return Evaluation::of(md.error());
    return Evaluation::of(metadata_to_json(md.value()));
  }

  Judgement judge_on(Backend& backend, const MetadataCase& c) const override {
    Judgement j;
    if (!backend.metadata()) return j.skip(missing_capability(backend, capability())), j;
    if (auto reason = backend.metadata()->unsupported(c.batch))
      return j.skip("backend " + backend.name() + " does not support this input: " + *reason), j;
    const Expected<Metadata> got = backend.metadata()->metadata(c.batch), want = ref::metadata(c.batch);
    if (judge_errors(got, want, j)) return j;
    compare_metadata(got.value(), want.value(), j);
    return j;
  }

  CoverageCell coverage_of(const MetadataCase& c) const override { return batch_coverage(c.batch); }
  CaseSize size_of(const MetadataCase& c) const override { return batch_size(c.batch); }
};

}  // namespace

const CaseOp& metadata_op() {
  static const MetadataOp op;
  return op;
}

json metadata_to_json(const Metadata& md) {
  Shape seqlens = md.extra, offsets = md.extra;
  seqlens.insert(seqlens.end(), {md.batch, md.max_segments});
  offsets.insert(offsets.end(), {md.batch, md.max_segments + 1});
  json out = {{"q_seqlens", case_json::nest(seqlens, md.q_seqlens)},
          {"kv_seqlens", case_json::nest(seqlens, md.kv_seqlens)},
          {"q_offsets", case_json::nest(offsets, md.q_offsets)},
          {"kv_offsets", case_json::nest(offsets, md.kv_offsets)},
          {"cu_seqlens_q", md.cu_seqlens_q},
          {"cu_seqlens_kv", md.cu_seqlens_kv},
          {"ragged_offsets_q", md.ragged_offsets_q},
          {"ragged_offsets_kv", md.ragged_offsets_kv}};
  // A backend's optional fields, when it returned them (the reference leaves them out).
  if (md.max_seqlen_q) out["max_seqlen_q"] = *md.max_seqlen_q;
  if (md.max_seqlen_kv) out["max_seqlen_kv"] = *md.max_seqlen_kv;
  if (md.indices_q) out["indices_q"] = *md.indices_q;
  if (md.indices_kv) out["indices_kv"] = *md.indices_kv;
  return out;
}

}  // namespace attn_oracle
