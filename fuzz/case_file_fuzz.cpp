// case_file_fuzz.cpp: the case-file reader on arbitrary bytes, then everything a
// readable case leads to. Invariants (a violation aborts, which the fuzzer
// reports as a crash):
//  - reading never throws and never crashes, whatever the bytes;
//  - a case that reads writes back to JSON that reads again to the same case;
//  - evaluating it on the reference (every op, replay.hpp) gives a result or an
//    Error, never a crash or an exception, and never NaN in an output;
//  - the production CPU twins judged against the reference on it (metadata and
//    codes exactly, floats by the tolerance rule) never fail.
// The memory budget is set to 1 MiB so that a large but valid case is refused
// quickly (over_memory_budget) rather than evaluated for seconds.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/runner/replay.hpp"

namespace attn_oracle::fuzz {
namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "case_file_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

Backend& backend(const char* name) {
  static const bool registered = (register_reference_backend(), register_production_backends(), true);
  (void)registered;
  static std::map<std::string, std::unique_ptr<Backend>> made;
  auto& b = made[name];
  if (!b) b = BackendRegistry::instance().make(name);
  return *b;
}

// Every number of eval's JSON (lse's -inf is printed as null, so NaN is a finding).
void expect_no_nan(const nlohmann::json& j, const std::string& path) {
  if (j.is_number_float() && std::isnan(j.get<double>())) finding("NaN in a reference output", path);
  if (j.is_structured())
    for (auto it = j.begin(); it != j.end(); ++it)
      expect_no_nan(it.value(), path + "/" + (j.is_object() ? it.key() : std::string("#")));
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
  expect_no_nan(evaluate_case(backend("reference"), c.value()).output, "");
  const Judgement twin = judge_case(backend("cpu"), c.value());
  if (twin.status == Judgement::Status::fail) finding("the production twin disagrees with the reference", twin.lines[0]);
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
