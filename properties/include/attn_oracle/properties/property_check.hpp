// property_check.hpp: how a property's check reports. A property is a draw (a
// Case from RapidCheck generators) and a check on that case; the check runs the
// same way under the runner, under `attn-oracle replay` and in the tests, so
// it reports with these exceptions rather than RapidCheck's macros:
//   fail_case("q_offsets[5]: backend 3, reference 4")   the property does not hold
//   decline_case("not representable: ...")              the case says nothing here
// reads what the draw recorded besides the case with drawn_value(), and
// notes what the runner reports besides the verdict in its CheckRecord.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle::inline properties {

struct CaseFailure {
  std::string message;  // one line: the first mismatch
};
struct CaseDeclined {
  std::string reason;
};

[[noreturn]] void fail_case(const std::string& message);
[[noreturn]] void decline_case(const std::string& reason);
// A call that returned `error`: the case fails with "<before><code> (<message>)<after>",
// except that `unsupported` (a backend declining at call time) and
// over_memory_budget (the suite's own limit, whoever passes it on) decline it:
// neither is a verdict on the backend.
[[noreturn]] void fail_with(const std::string& before, const Error& error, const std::string& after = "");
inline void require(bool holds, const std::string& message) {
  if (!holds) fail_case(message);
}
// A backend may decline at call time as well as in unsupported() (a worker
// process learns only then): `unsupported` from a call declines the case.
inline void decline_if_unsupported(const Error& e) {
  if (e.code == ErrorCode::unsupported) decline_case("unsupported: " + e.message);
}

// What one check notes about its case besides the verdict, handed to the check
// and returned with the trial (property.hpp) for the run's report.
struct CheckRecord {
  std::vector<std::string> labels;  // the drawn mix's labels, counted over the passing cases of a run
  // The worst error / budget of the case's tolerance checks; nullopt when none
  // ran (exact properties: metadata, error codes).
  std::optional<double> worst_ratio;
  double backend_seconds = 0.0;  // inside the backend's metadata, attention and small-seq calls (backend_calls.hpp)

  void classify(bool holds, const std::string& label) {
    if (holds) labels.push_back(label);
  }
  // Every check of a comparison, noted before any is judged.
  void note(const ToleranceCheck& check);
  void note(const std::vector<ToleranceCheck>& checks);
};

std::string_view op_name(const Case& c);  // "metadata", "attention", ...

// The payload a property checks; fails naming the case's op when it holds another.
template <class Payload>
const Payload& payload_of(const Case& c) {
  if (const Payload* p = c.as<Payload>()) return *p;
  fail_case("this property does not check " + std::string(op_name(c)) + " cases");
}

// The case with `drawn` recorded for its check (case_file.hpp PropertyRecord).
Case with_drawn(Case c, nlohmann::json drawn);
// A value the draw recorded, or `fallback` when the case has none (a hand-written
// case, a fixture): the check's default for it.
template <class T>
T drawn_value(const Case& c, const char* key, T fallback) {
  if (!c.property || !c.property->drawn.contains(key)) return fallback;
  try {
    return c.property->drawn[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail_case(std::string("property.drawn.") + key + " has the wrong type: " + c.property->drawn[key].dump());
  }
}

}  // namespace attn_oracle::properties
