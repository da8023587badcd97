// kv_buffer_op.cpp: the `kv_buffer` op (kv_buffer_case.hpp): its fields, its
// evaluation on a K/V buffer capability (every micro-sequence's metadata, then
// the stream), its judgement (metadata exactly, the stream by the tolerance rule
// against the whole-sequence oracle) and its coverage. Reading never throws out
// of case_from_json; values are not validated here (an empty doc_lengths or
// m < 1 is the validator's code, which a fixture may pin).
// Tested by tests/kv_buffer_test.cpp and the kv_buffer fixtures (tests/fixtures_test.cpp).
#include "attn_oracle/cases/kv_buffer_case.hpp"

#include <cmath>

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;
using case_json::fail;
using case_json::required;


// [tokens][heads][dim] from a flat row-major tensor (f maps each value).
template <class F>
json nest3(const std::vector<double>& t, int64_t a, int64_t b, int64_t c, F f) {
  json out = json::array();
  for (int64_t i = 0; i < a; ++i) {
    json rows = json::array();
    for (int64_t h = 0; h < b; ++h) {
      json row = json::array();
      for (int64_t k = 0; k < c; ++k) row.push_back(f(t[(i * b + h) * c + k]));
      rows.push_back(std::move(row));
    }
    out.push_back(std::move(rows));
  }
  return out;
}

// backend_takes.hpp's answer; a hook may assume a valid problem, so an invalid one is asked of the domain alone.
std::optional<std::string> declines(Backend& backend, const KvBufferProblem& problem) {
  return validate_kv_buffer(problem) ? kv_buffer_declines(backend, problem) : kv_buffer_domain_declines(backend, problem);
}

// Every micro-sequence's plan and the stream, or the first error.
struct KvRun {
  std::vector<MicroSequenceMetadata> plans;
  Expected<AttentionResult> stream = Error{ErrorCode::unsupported, "not run"};
};

// `sizes` is the validator's verdict; a capability must reject an invalid problem
// with the validator's code, from stream().
KvRun run_on(KvBufferCapability& cap, const KvBufferCase& c, const AttentionInputs& in) {
  KvRun run;
  const Expected<KvBufferSizes> sizes = validate_kv_buffer(c.problem, &in);
  for (int64_t i = 0; sizes && i < sizes->micro_sequences; ++i) {
    auto md = cap.micro_sequence(c.problem, i);
    if (!md) return run.stream = md.error(), run;
    run.plans.push_back(md.value());
  }
  run.stream = cap.stream(c.problem, in);
  return run;
}

class KvBufferOp final : public TypedCaseOp<KvBufferCase> {
 public:
  std::string_view name() const override { return "kv_buffer"; }
  Capability capability() const override { return Capability::kv_buffer; }
  double expected_tolerance() const override { return 1e-12; }

  CasePayload read(const json& j) const override {
    std::set<std::string> keys = case_json::shape_keys();
    keys.insert({"doc_lengths", "micro_seq_tokens", "data"});
    case_json::reject_unknown_keys(j, keys);
    KvBufferCase c;
    const json& lengths = required(j, "doc_lengths");
    if (!lengths.is_array()) fail("doc_lengths: expected an array of integers, found " + lengths.dump());
    for (size_t i = 0; i < lengths.size(); ++i)
      c.problem.doc_lengths.push_back(case_json::int_field(lengths[i], "doc_lengths[" + std::to_string(i) + "]"));
    c.problem.micro_seq_tokens = case_json::int_field(required(j, "micro_seq_tokens"), "micro_seq_tokens");
    c.problem.shape = case_json::parse_shape(j);
    const json& data = required(j, "data");
    if (!data.is_object()) fail("data: expected {\"seed\": N}, found " + data.dump());
    case_json::reject_unknown_keys(data, {"seed"}, "data.");
    c.data_seed = case_json::seed_field(required(data, "seed", "data."), "data.seed");
    return c;
  }

 protected:
  json write_fields(const KvBufferCase& c) const override {
    json j = case_json::shape_to_json(c.problem.shape);
    j.update({{"doc_lengths", c.problem.doc_lengths},
              {"micro_seq_tokens", c.problem.micro_seq_tokens},
              {"data", {{"seed", c.data_seed}}}});
    return j;
  }

  Evaluation evaluate_on(Backend& backend, const KvBufferCase& c) const override {
    KvBufferCapability* cap = backend.kv_buffer();
    if (!cap) return Evaluation::missing(backend, capability());
    if (auto reason = declines(backend, c.problem)) return Evaluation::declined_because(declined_by(backend, *reason));
    const KvRun run = run_on(*cap, c, kv_buffer_inputs(c));
    if (!run.stream) return Evaluation::of(run.stream.error());
    if (!validate_kv_buffer(c.problem)) return Evaluation::of(json{{"accepted", "an invalid kv_buffer problem"}});
    return Evaluation::of(kv_buffer_result_to_json(c.problem, run.plans, run.stream.value()));
  }

  Judgement judge_on(Backend& backend, const KvBufferCase& c) const override {
    Judgement j;
    KvBufferCapability* cap = backend.kv_buffer();
    if (!cap) return j.skip(missing_capability(backend, capability())), j;
    if (auto reason = declines(backend, c.problem)) return j.skip(declined_by(backend, *reason)), j;
    const AttentionInputs in = kv_buffer_inputs(c);
    const KvRun got = run_on(*cap, c, in);
    const KvRun want = run_on(reference_kv_buffer(), c, in);
    if (judge_errors(got.stream, want.stream, j)) return j;
    for (size_t i = 0; i < want.plans.size(); ++i) {
      const json g = i < got.plans.size() ? micro_sequence_to_json(got.plans[i]) : json();
      const json w = micro_sequence_to_json(want.plans[i]);
      for (auto it = w.begin(); it != w.end(); ++it)
        if (g.value(it.key(), json()) != it.value())
          j.fail("micro_sequences[" + std::to_string(i) + "]." + it.key() + ": backend " +
                 g.value(it.key(), json()).dump() + ", reference " + it.value().dump());
    }
    if (j.passed()) j.note("micro-sequence metadata: every field equal");
    const Expected<AttentionResult> oracle = ref::kv_buffer_whole_sequence(c.problem, in);
    judge_tolerance(check_attention_tolerance(whole_sequence_problem(c.problem), in, got.stream.value(), oracle.value()),
                    j);
    return j;
  }

  CoverageCell coverage_of(const KvBufferCase& c) const override {
    const KvBufferProblem& p = c.problem;
    CoverageCell cell{"-", {}, {}};
    int64_t n = 0;
    for (int64_t l : p.doc_lengths) n += l;
    if (n > p.micro_seq_tokens) cell.layouts.insert("micro-sequences>1");
    if (n % p.micro_seq_tokens != 0) cell.layouts.insert("m does not divide N");
    if (p.doc_lengths.size() > 1) cell.layouts.insert("documents>1");
    add_shape_coverage(p.shape, cell);
    return cell;
  }

  CaseSize size_of(const KvBufferCase& c) const override {
    int64_t n = 0;
    for (int64_t l : c.problem.doc_lengths) n += l;
    return CaseSize{1, n, 1};
  }
};

}  // namespace

const CaseOp& kv_buffer_op() {
  static const KvBufferOp op;
  return op;
}

AttentionInputs kv_buffer_inputs(const KvBufferCase& c) { return generate_kv_buffer_inputs(c.problem, c.data_seed); }

json micro_sequence_to_json(const MicroSequenceMetadata& md) {
  return {{"index", md.index},
          {"begin", md.begin},
          {"end", md.end},
          {"first_document_begin", md.first_document_begin},
          {"cu_seqlens_q", md.cu_seqlens_q},
          {"cu_seqlens_k", md.cu_seqlens_k},
          {"q_document", md.q_document},
          {"q_position", md.q_position},
          {"kv_document", md.kv_document},
          {"kv_position", md.kv_position}};
}

json kv_buffer_result_to_json(const KvBufferProblem& p, const std::vector<MicroSequenceMetadata>& plans,
                              const AttentionResult& r) {
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  const int64_t hq = p.shape.heads_q, hkv = p.shape.heads_kv, d = p.shape.head_dim;
  json micro = json::array();
  for (const MicroSequenceMetadata& md : plans) micro.push_back(micro_sequence_to_json(md));
  json j = {{"micro_sequences", micro}, {"o", nest3(r.o, n, hq, d, case_json::float_json)}, {"lse", nest3(r.lse, 1, hq, n, case_json::float_json)[0]}};
  if (r.grads) {
    j["dq"] = nest3(r.grads->dq, n, hq, d, case_json::float_json);
    j["dk"] = nest3(r.grads->dk, n, hkv, d, case_json::float_json);
    j["dv"] = nest3(r.grads->dv, n, hkv, d, case_json::float_json);
  }
  return j;
}

}  // namespace attn_oracle::cases
