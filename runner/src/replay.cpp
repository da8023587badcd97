// replay.cpp: evaluate, judge and replay one case (replay.hpp).
// Tested by tests/fixtures_test.cpp (every fixture on every backend),
// tests/cli_test.cpp and tests/planted_bugs_test.cpp (every planted bug's
// counterexample replays to the failure it was found with).
#include "attn_oracle/runner/replay.hpp"

#include <cmath>
#include <fstream>

#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace attn_oracle::inline runner {
namespace {

using nlohmann::json;

// Differences between the reference's JSON and `expected` (numbers to `rel`
// relative, integers exactly), each a line of `j`.
void diff_json(const json& got, const json& want, const std::string& path, double rel, Judgement& j) {
  if (got.is_number_integer() && want.is_number_integer()) {
    if (got == want) return;
  } else if (got.is_number() && want.is_number()) {
    const double a = got.get<double>(), b = want.get<double>();
    if (std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b))) return;
  } else if (got.is_array() && want.is_array() && got.size() == want.size()) {
    for (size_t i = 0; i < got.size(); ++i) diff_json(got[i], want[i], path + "[" + std::to_string(i) + "]", rel, j);
    return;
  } else if (got.is_object() && want.is_object()) {
    const std::string prefix = path.empty() ? "" : path + ".";
    for (auto it = want.begin(); it != want.end(); ++it)
      diff_json(got.contains(it.key()) ? got[it.key()] : json(), it.value(), prefix + it.key(), rel, j);
    for (auto it = got.begin(); it != got.end(); ++it)
      if (!want.contains(it.key()))
        j.fail("reference disagrees with the case's expected result: " + prefix + it.key() + ": not in expected");
    return;
  } else if (got == want) {
    return;
  }
  j.fail("reference disagrees with the case's expected result: " + path + ": reference " + got.dump() + ", expected " +
         want.dump());
}

json expected_code(const json& expected) {
  const json& e = expected["error"];
  return e.is_object() && e.contains("code") ? e["code"] : json();
}

}  // namespace

Evaluation evaluate_case(Backend& backend, const Case& c) { return op_of(c).evaluate(backend, c.payload); }

Judgement judge_case(Backend& backend, const Case& c) { return op_of(c).judge(backend, c.payload); }

Judgement check_expected(const Case& c) {
  Judgement j;
  if (!c.expected) return j;
  const CaseOp& op = op_of(c);
  const std::unique_ptr<Backend> reference = make_reference_backend();
  const Evaluation ref = op.evaluate(*reference, c.payload);
  const json& expected = *c.expected;
  if (expected.is_object() && expected.contains("error")) {
    if (ref.kind != Evaluation::Kind::rejected)
      j.fail("reference disagrees with the case's expected result: it accepts the input, expected error " +
             expected_code(expected).dump());
    else {
      diff_json(ref.output["error"]["code"], expected_code(expected), "error.code", 0.0, j);
      if (op.pins_error_messages() && expected["error"].contains("message"))
        diff_json(ref.output["error"]["message"], expected["error"]["message"], "error.message", 0.0, j);
    }
  } else {
    diff_json(ref.output, expected, "", op.expected_tolerance(), j);
  }
  if (j.passed()) j.note("reference matches the case's expected result");
  return j;
}

Judgement replay_case(Backend& backend, const Case& c) {
  Judgement j = c.property ? check_recorded_property(backend, c) : judge_case(backend, c);
  j.merge(check_expected(c));
  return j;
}

Expected<Judgement> replay_file(Backend& backend, const std::string& path) {
  std::ifstream in(path);
  const json raw = json::parse(in, nullptr, /*allow_exceptions=*/false);
  const Expected<Case> c = raw.is_discarded() ? read_case_file(path) : case_from_json(raw);
  if (c) return replay_case(backend, c.value());
  const bool pinned = raw.is_object() && raw.contains("expected") && raw["expected"].is_object() &&
                      raw["expected"].contains("error");
  if (!pinned) return c.error();
  Judgement j;
  const json want = expected_code(raw["expected"]);
  if (want == json(std::string(to_string(c.error().code))))
    j.note("the reader rejects the file with " + want.get<std::string>() + ", as expected");
  else
    j.fail("the reader rejects the file with " + std::string(to_string(c.error().code)) + " (" + c.error().message +
           "), expected " + want.dump());
  return j;
}

Case promote_case(Case c, const std::string& note) {
  const std::unique_ptr<Backend> reference = make_reference_backend();
  c.expected = evaluate_case(*reference, c).output;
  c.note = note;
  return c;
}

}  // namespace attn_oracle::runner
