// fixtures_test.cpp: every *.case.json under ATTN_ORACLE_FIXTURES_DIR (found
// recursively) is evaluated on every built-in backend with the capability the op
// needs (the reference, the cpu twins, cuda when present) and compared with its
// `expected` field: metadata exactly, errors by code only, attention values to
// 1e-12 relative (doubles written by eval round-trip; the margin only absorbs a
// change of summation order inside the reference). Production backends on
// attention fixtures are judged by the tolerance rule against the reference, on
// representable inputs (kernels realise the index rule, DESIGN section 4).
//
// small_seq fixtures: the reference backend against `expected` to 1e-12
// relative; other backends with the capability by the
// tolerance rule per output (small_seq_checks.hpp), without a representability
// condition (the small-seq kernel applies the token-level mask).
//
// kv_buffer fixtures: see check_kv_buffer_fixture. sharding fixtures: see
// check_sharding_fixture.
//
// A fixture without `expected` fails: a fixture pins a result. Ops the reference
// does not model yet are skipped with a reason.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/kv_buffer_case.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/sharded_execution.hpp"
#include "attn_oracle/sharding_case.hpp"
#include "attn_oracle/small_seq_checks.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> fixture_paths() {
  std::vector<std::string> paths;
  const fs::path root(ATTN_ORACLE_FIXTURES_DIR);
  if (!fs::exists(root)) return paths;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() > 10 &&
        name.compare(name.size() - 10, 10, ".case.json") == 0)
      paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// "design/ex5b.case.json" -> "design_ex5b".
std::string test_name(const std::string& path) {
  std::string rel = fs::relative(path, ATTN_ORACLE_FIXTURES_DIR).string();
  rel = rel.substr(0, rel.size() - 10);
  for (char& ch : rel)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return rel;
}

// What `attn-oracle eval` prints for the case on `backend`; null if it lacks the capability.
json backend_output(Backend& backend, const Case& c) {
  if (c.op == CaseOp::metadata) {
    if (!backend.metadata()) return json();
    auto md = backend.metadata()->metadata(c.batch);
    return md ? metadata_to_json(md.value()) : error_to_json(md.error());
  }
  if (c.op == CaseOp::small_seq) {
    auto inputs = attention_inputs(c);
    if (!inputs) return error_to_json(inputs.error());
    const AttentionProblem problem = attention_problem(c);
    if (!backend.small_seq()) return json();
    auto r = backend.small_seq()->small_seq(problem, inputs.value());
    return r ? small_seq_result_to_json(problem, r.value()) : error_to_json(r.error());
  }
  if (!backend.attention()) return json();
  auto inputs = attention_inputs(c);
  if (!inputs) return error_to_json(inputs.error());
  auto r = backend.attention()->attention(attention_problem(c), inputs.value());
  return r ? attention_result_to_json(attention_problem(c), r.value()) : error_to_json(r.error());
}

// Appends "path: got X, want Y" for every difference (numbers to `rel`).
void diff(const json& got, const json& want, const std::string& path, double rel,
          std::vector<std::string>& out) {
  if (got.is_array() && want.is_array() && got.size() == want.size()) {
    for (size_t i = 0; i < got.size(); ++i)
      diff(got[i], want[i], path + "[" + std::to_string(i) + "]", rel, out);
    return;
  }
  if (got.is_object() && want.is_object()) {
    json keys = got;
    keys.update(want);
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const std::string field = (path.empty() ? "" : path + ".") + it.key();
      diff(got.value(it.key(), json()), want.value(it.key(), json()), field, rel, out);
    }
    return;
  }
  const bool close = got.is_number_float() && want.is_number() &&
                     std::fabs(got.get<double>() - want.get<double>()) <=
                         rel * std::max(1.0, std::fabs(want.get<double>()));
  if (got != want && !close) out.push_back(path + ": got " + got.dump() + ", want " + want.dump());
}

struct FixtureParam {
  std::string path, backend;
};

std::vector<FixtureParam> fixture_params() {
  register_builtin_backends();
  std::vector<FixtureParam> out;
  for (const std::string& backend : BackendRegistry::instance().names())
    for (const std::string& path : fixture_paths()) out.push_back({path, backend});
  return out;
}

// A production backend on an attention fixture: the tolerance rule against the
// float64 reference (the file's `expected` pins the reference itself), on
// representable inputs only (DESIGN section 4: kernels apply the index rule).
void check_attention_against_reference(Backend& backend, const Case& c) {
  if (!backend.attention()) GTEST_SKIP() << "backend " << backend.name() << " lacks the attention capability";
  const AttentionProblem problem = attention_problem(c);
  if (!ref::representability(problem.batch).representable)
    GTEST_SKIP() << "not representable: kernels realise the index rule, the reference the token-level mask";
  if (auto reason = backend.attention()->unsupported(problem)) GTEST_SKIP() << *reason;
  const AttentionInputs inputs = attention_inputs(c).value();
  const auto got = backend.attention()->attention(problem, inputs);
  const auto want = ref::attention_dense_masked(problem, inputs);
  ASSERT_EQ(got.ok(), want.ok());
  if (!want.ok()) {
    EXPECT_EQ(got.error().code, want.error().code);
    return;
  }
  for (const ToleranceCheck& check : check_attention_tolerance(problem, inputs, got.value(), want.value()))
    EXPECT_TRUE(check.pass) << check.describe();
}

// A production backend on a small_seq fixture: the tolerance rule per output
// against ref::small_seq; an input the reference rejects must give its code.
void check_small_seq_against_reference(Backend& backend, const Case& c) {
  if (!backend.small_seq()) GTEST_SKIP() << "backend " << backend.name() << " lacks the small_seq capability";
  const AttentionProblem problem = attention_problem(c);
  const AttentionInputs inputs = attention_inputs(c).value();
  const auto want = ref::small_seq(problem, inputs);
  if (want.ok())
    if (auto reason = backend.small_seq()->unsupported(problem)) GTEST_SKIP() << *reason;
  const auto got = backend.small_seq()->small_seq(problem, inputs);
  ASSERT_EQ(got.ok(), want.ok()) << (got.ok() ? want.error().message : got.error().message);
  if (!want.ok()) {
    EXPECT_EQ(got.error().code, want.error().code);
    return;
  }
  for (const ToleranceCheck& check : check_small_seq_tolerance(problem, inputs, got.value(), want.value()))
    EXPECT_TRUE(check.pass) << check.describe();
}

// A kv_buffer fixture (DESIGN section 7): the reference's eval output against
// `expected` to 1e-12 relative (metadata exactly); another backend's metadata
// exactly against `expected` and its stream by the tolerance rule against the
// whole-sequence oracle; an expected error by code.
void check_kv_buffer_fixture(Backend& backend, const Case& c, const json& want) {
  if (!backend.kv_buffer()) GTEST_SKIP() << "backend " << backend.name() << " lacks the kv_buffer capability";
  if (validate_kv_buffer(c.kv_buffer))
    if (auto reason = backend.kv_buffer()->unsupported(c.kv_buffer)) GTEST_SKIP() << *reason;
  const json got = evaluate_kv_buffer_case(*backend.kv_buffer(), c);
  std::vector<std::string> differences;
  if (want.contains("error")) {
    diff(got.contains("error") ? got["error"]["code"] : got, want["error"].value("code", json()), "error.code", 0.0,
         differences);
  } else if (backend.name() == "reference") {
    diff(got, want, "", 1e-12, differences);
  } else {
    ASSERT_FALSE(got.contains("error")) << got.dump();
    diff(got["micro_sequences"], want["micro_sequences"], "micro_sequences", 0.0, differences);
    const AttentionInputs in = kv_buffer_inputs(c).value();
    const auto streamed = backend.kv_buffer()->stream(c.kv_buffer, in);
    ASSERT_TRUE(streamed.ok()) << streamed.error().message;
    for (const ToleranceCheck& check : check_attention_tolerance(whole_sequence_problem(c.kv_buffer), in, streamed.value(),
                                                                 ref::kv_buffer_whole_sequence(c.kv_buffer, in).value()))
      EXPECT_TRUE(check.pass) << check.describe();
  }
  for (size_t i = 0; i < differences.size() && i < 10; ++i) ADD_FAILURE() << differences[i];
}

// A sharding fixture (DESIGN section 8): an expected error by code and exact
// message on every backend with the capability; the reference's result against
// `expected` to 1e-12 relative; another backend's sharded run by the tolerance
// rule against the unsharded float64 reference, skipped when a device problem is
// not representable and the backend's devices run kernels (DESIGN section 4).
void check_sharding_fixture(Backend& backend, const Case& c, const json& want) {
  if (!backend.sharding()) GTEST_SKIP() << "backend " << backend.name() << " lacks the sharding capability";
  const auto got = evaluate_sharding_case(*backend.sharding(), c);
  if (want.contains("error")) {
    ASSERT_FALSE(got.ok()) << "accepted a case that expects " << want.dump();
    EXPECT_EQ(json(std::string(to_string(got.error().code))), want["error"].value("code", json()));
    if (want["error"].contains("message")) {
      EXPECT_EQ(json(got.error().message), want["error"]["message"]);
    }
    return;
  }
  ASSERT_TRUE(got.ok()) << got.error().message;
  std::vector<std::string> differences;
  if (backend.name() == "reference" || !got.value()) diff(sharding_evaluation_to_json(c, got), want, "", 1e-12, differences);
  for (size_t i = 0; i < differences.size() && i < 10; ++i) ADD_FAILURE() << differences[i];
  if (backend.name() == "reference" || !got.value()) return;
  const AttentionProblem problem = attention_problem(c);
  const auto pieces = device_problems(c.sharding, problem);
  ASSERT_TRUE(pieces.ok()) << pieces.error().message;
  if (!backend.sharding()->token_level_mask())
    for (const AttentionProblem& piece : pieces.value())
      if (!ref::representability(piece.batch).representable) GTEST_SKIP() << "a device problem is not representable";
  const AttentionInputs inputs = attention_inputs(c).value();
  for (const ToleranceCheck& check :
       check_attention_tolerance(problem, inputs, *got.value(), ref::attention_dense_masked(problem, inputs).value()))
    EXPECT_TRUE(check.pass) << check.describe();
}

void PrintTo(const FixtureParam& p, std::ostream* os) { *os << p.backend << " on " << p.path; }

class Fixture : public ::testing::TestWithParam<FixtureParam> {};

// Reads `expected` from the raw JSON so that a fixture can also pin an error the
// reader itself reports (bad_mask, bad_window, bad_case).
TEST_P(Fixture, BackendMatchesExpected) {
  const std::string& path = GetParam().path;
  std::ifstream in(path);
  const json file = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(file.is_discarded()) << path << " is not valid JSON";
  ASSERT_TRUE(file.is_object() && file.contains("expected")) << path << " has no `expected` field";
  auto c = case_from_json(file);
  if (c && c->op == CaseOp::kv_buffer) {
    auto backend = BackendRegistry::instance().make(GetParam().backend);
    return check_kv_buffer_fixture(*backend, c.value(), file["expected"]);
  }
  if (c && c->op == CaseOp::sharding) {
    auto backend = BackendRegistry::instance().make(GetParam().backend);
    return check_sharding_fixture(*backend, c.value(), file["expected"]);
  }
  if (c && c->op != CaseOp::metadata && c->op != CaseOp::attention && c->op != CaseOp::small_seq)
    GTEST_SKIP() << "op " << to_string(c->op) << " is not modelled by the reference yet";
  auto backend = BackendRegistry::instance().make(GetParam().backend);
  if (c && c->op == CaseOp::attention && GetParam().backend != "reference")
    return check_attention_against_reference(*backend, c.value());
  if (c && c->op == CaseOp::small_seq && GetParam().backend != "reference")
    return check_small_seq_against_reference(*backend, c.value());
  const json got = c ? backend_output(*backend, c.value()) : error_to_json(c.error());
  if (got.is_null()) GTEST_SKIP() << "backend " << GetParam().backend << " lacks the " << to_string(c->op) << " capability";
  const json& want = file["expected"];
  std::vector<std::string> differences;
  if (want.contains("error")) {
    diff(got.contains("error") ? got["error"]["code"] : got, want["error"].value("code", json()),
         "error.code", 0.0, differences);
  } else {
    diff(got, want, "", c && (c->op == CaseOp::attention || c->op == CaseOp::small_seq) ? 1e-12 : 0.0, differences);
  }
  for (size_t i = 0; i < differences.size() && i < 10; ++i) ADD_FAILURE() << differences[i];
  EXPECT_TRUE(differences.empty()) << path << ": " << differences.size() << " differences";
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, Fixture, ::testing::ValuesIn(fixture_params()),
                         [](const ::testing::TestParamInfo<FixtureParam>& info) {
                           return info.param.backend + "__" + test_name(info.param.path);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fixture);

TEST(Fixtures, DesignExamplesArePresent) {
  const auto paths = fixture_paths();
  for (const char* name : {"ex1", "ex2", "ex3", "ex4", "ex5", "ex5b", "ex6", "ex7", "ex8",
                           "ex9_broadcast", "ex9_extra_dims_mismatch"}) {
    const std::string want = std::string("design_") + name;
    EXPECT_TRUE(std::any_of(paths.begin(), paths.end(),
                            [&](const std::string& p) { return test_name(p) == want; }))
        << "missing fixtures/design/" << name << ".case.json";
  }
}

}  // namespace
}  // namespace attn_oracle
