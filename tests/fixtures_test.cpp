// fixtures_test.cpp: every *.case.json under ATTN_ORACLE_FIXTURES_DIR (found
// recursively) is replayed on every built-in backend (the reference, the cpu
// twins, cuda when present), as `attn-oracle replay` does (replay.hpp): a case
// that records a property re-runs that property's check; any other case is
// judged as the backend against the float64 reference (metadata and error codes
// exactly, floats by the tolerance rule, skipped where the backend declines the
// problem or realises the index rule on an input that is not representable);
// then the reference is compared with the file's `expected` (errors by code,
// numbers to 1e-12 relative). A fixture without `expected` fails: a fixture
// pins a result. A file the reader rejects passes when `expected` pins that code.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn_oracle/runner/replay.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> fixture_paths() {
  std::vector<std::string> paths;
  const fs::path root(ATTN_ORACLE_FIXTURES_DIR);
  if (!fs::exists(root)) return paths;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file() && entry.path().string().ends_with(".case.json")) paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// "design/ex5b.case.json" -> "design_ex5b".
// Every character a test name cannot hold becomes an underscore ("cpu-sm90" -> "cpu_sm90").
std::string identifier(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::string test_name(const std::string& path) {
  const std::string rel = fs::relative(path, ATTN_ORACLE_FIXTURES_DIR).string();
  return identifier(rel.substr(0, rel.size() - 10));
}

struct FixtureParam {
  std::string path, backend;
};

// Every fixture on every backend this build ships. Evaluated at static
// initialisation: test files of this executable register their test backends
// inside their tests, never before, so this list is the builtins alone.
std::vector<FixtureParam> fixture_params() {
  register_builtin_backends();
  std::vector<FixtureParam> out;
  for (const std::string& backend : BackendRegistry::instance().names())
    for (const std::string& path : fixture_paths()) out.push_back({path, backend});
  return out;
}

void PrintTo(const FixtureParam& p, std::ostream* os) { *os << p.backend << " on " << p.path; }

class Fixture : public ::testing::TestWithParam<FixtureParam> {};

TEST_P(Fixture, ReplaysToItsExpectedResult) {
  const std::string& path = GetParam().path;
  std::ifstream in(path);
  const json file = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(file.is_discarded()) << path << " is not valid JSON";
  ASSERT_TRUE(file.is_object() && file.contains("expected")) << path << " has no `expected` field";
  auto backend = BackendRegistry::instance().make(GetParam().backend);
  const Expected<Judgement> j = replay_file(*backend, path);
  ASSERT_TRUE(j.ok()) << j.error().message;
  std::string lines;
  for (const std::string& l : j->lines) lines += "\n  " + l;
  if (j->status == Judgement::Status::skip) GTEST_SKIP() << lines;
  EXPECT_EQ(j->status, Judgement::Status::pass) << path << lines;
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, Fixture, ::testing::ValuesIn(fixture_params()),
                         [](const ::testing::TestParamInfo<FixtureParam>& info) {
                           return identifier(info.param.backend) + "__" + test_name(info.param.path);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fixture);

TEST(Fixtures, DesignExamplesArePresent) {
  const auto paths = fixture_paths();
  for (const char* name : {"ex1", "ex2", "ex3", "ex4", "ex5", "ex5b", "ex6", "ex7", "ex8", "ex9_broadcast",
                           "ex9_extra_dims_mismatch"}) {
    const std::string want = std::string("design_") + name;
    EXPECT_TRUE(std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return test_name(p) == want; }))
        << "missing fixtures/design/" << name << ".case.json";
  }
}

}  // namespace
}  // namespace attn_oracle
