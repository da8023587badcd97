// case_file_fuzz.cpp: the case-file reader on arbitrary bytes, then everything a
// readable case leads to. Invariants (a violation aborts, which the fuzzer
// reports as a crash):
//  - reading never throws and never crashes, whatever the bytes;
//  - a case that reads writes back to JSON that reads again to the same case;
//  - evaluating it on the reference (metadata, attention with its inputs,
//    small_seq, kv_buffer, sharding) gives a result or an Error, never a crash
//    or an exception, and never NaN in an output; a metadata case gets the
//    same code or the same metadata from the production CPU twin.
// The memory budget is set to 1 MiB so that a large but valid case is refused
// quickly (over_memory_budget) rather than evaluated for seconds.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/kv_buffer_case.hpp"
#include "attn_oracle/memory_budget.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/sharding_case.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle::fuzz {
namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "case_file_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void expect_finite(const std::vector<double>& values, const char* name) {
  for (double x : values)
    if (std::isnan(x)) finding("NaN in a reference output", name);
}

Backend* reference() {
  static const std::unique_ptr<Backend> backend = make_reference_backend();
  return backend.get();
}

void evaluate_metadata(const Case& c) {
  const Expected<Metadata> ref = ref::metadata(c.batch);
  const Expected<Metadata> twin = gpu::metadata_twin(c.batch);
  if (ref.ok() != twin.ok() || (!ref.ok() && ref.error().code != twin.error().code))
    finding("reference and twin disagree on the error",
            (ref.ok() ? "ok" : ref.error().message) + " / " + (twin.ok() ? "ok" : twin.error().message));
  if (ref.ok() && !(ref.value() == twin.value())) finding("reference and twin metadata differ", "");
}

void evaluate_attention(const Case& c) {
  const Expected<AttentionInputs> inputs = attention_inputs(c);
  if (!inputs) return;
  const AttentionProblem problem = attention_problem(c);
  if (c.op == CaseOp::small_seq) {
    if (auto r = ref::small_seq(problem, inputs.value())) {
      expect_finite(r->o, "small_seq o");
      expect_finite(r->p, "small_seq p");
    }
    return;
  }
  if (auto r = ref::attention_per_document(problem, inputs.value())) {
    expect_finite(r->o, "o");
    if (r->grads) expect_finite(r->grads->dq, "dq");
  }
}

void run(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  const Expected<Case> c = case_from_json(j);
  if (!c) return;
  const nlohmann::json written = case_to_json(c.value());
  const Expected<Case> again = case_from_json(written);
  if (!again) finding("a case that was read does not read back", again.error().message + "\n" + written.dump());
  if (case_to_json(again.value()) != written) finding("a case changes on a round trip", written.dump());
  if (c->op == CaseOp::metadata) evaluate_metadata(c.value());
  if (c->op == CaseOp::attention || c->op == CaseOp::small_seq) evaluate_attention(c.value());
  if (c->op == CaseOp::kv_buffer) (void)evaluate_kv_buffer_case(*reference()->kv_buffer(), c.value());
  if (c->op == CaseOp::sharding) (void)evaluate_sharding_case(*reference()->sharding(), c.value());
}

}  // namespace
}  // namespace attn_oracle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attn_oracle::set_memory_budget(int64_t{1} << 20);
  try {
    attn_oracle::fuzz::run(data, size);
  } catch (const std::exception& e) {
    attn_oracle::fuzz::finding("an exception escaped", e.what());
  }
  return 0;
}
