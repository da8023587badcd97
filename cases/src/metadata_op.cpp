// metadata_op.cpp: the `metadata` op (metadata_case.hpp): its fields, its
// evaluation on a backend's metadata capability, its judgement (every integer
// and the error code exactly, against ref::metadata) and its coverage.
// Tested by tests/case_file_test.cpp, tests/fixtures_test.cpp and tests/cli_test.cpp.
#include "attn_oracle/cases/metadata_case.hpp"

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;

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
    if (auto reason = metadata_declines(backend, c.batch)) return Evaluation::declined_because(declined_by(backend, *reason));
    const Expected<Metadata> md = backend.metadata()->metadata(c.batch);
    if (!md) return Evaluation::of(md.error());
    return Evaluation::of(metadata_to_json(md.value()));
  }

  Judgement judge_on(Backend& backend, const MetadataCase& c) const override {
    Judgement j;
    if (!backend.metadata()) return j.skip(missing_capability(backend, capability())), j;
    if (auto reason = metadata_declines(backend, c.batch)) return j.skip(declined_by(backend, *reason)), j;
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

}  // namespace attn_oracle::cases
