// bad_inputs_test.cpp: the bad-input corpus (fixtures/bad_inputs). Each file is
// one way a user can hand the tool a broken case (malformed JSON, wrong types,
// ragged arrays, integers outside int64, non-finite numbers, sizes over the
// memory budget, every code of docs/semantics.md#input-validation-in-precedence-order, unsupported
// combinations), and manifest.json pins what `attn-oracle eval` must answer: exit 2 and nothing on
// stdout but {"error": {"code", "message"}}, with the expected code and a message
// naming the field or value. A crash, a hang, a partial result or a different
// code fails the test.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

const std::string kDir = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/bad_inputs";

struct BadInput {
  std::string file, code, mentions, backend, args;
  std::string name;  // the test's name when one file serves two entries
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.file << " (" << b.code << ")"; }

std::vector<BadInput> load_manifest() {
  std::ifstream in(kDir + "/manifest.json");
  std::vector<BadInput> out;
  if (!in) return out;
  for (const json& e : json::parse(in)) {
    BadInput b{e.at("file"), e.at("code"), e.at("mentions"), e.value("backend", "reference"), "", e.value("name", "")};
    for (const json& a : e.value("args", json::array())) b.args += " '" + a.get<std::string>() + "'";
    out.push_back(b);
  }
  return out;
}

struct CliRun {
  int status = -1;  // the exit code, or -1 when killed by a signal
  std::string out;
};

CliRun eval(const BadInput& b) {
  const std::string command = std::string("'") + ATTN_ORACLE_CLI + "' eval --backend " + b.backend + b.args +
                              " '" + kDir + "/" + b.file + "' 2>/dev/null";
  CliRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class BadInputs : public ::testing::TestWithParam<BadInput> {};

TEST(BadInputCorpus, HasAtLeastFortyCases) { EXPECT_GE(load_manifest().size(), 40u); }

TEST_P(BadInputs, EvalExitsTwoWithTheCodeAndOnlyTheError) {
  const BadInput& b = GetParam();
  const CliRun r = eval(b);
  ASSERT_EQ(r.status, 2) << b.file << ": stdout was\n" << r.out;
  json j;
  ASSERT_NO_THROW(j = json::parse(r.out)) << b.file << ": stdout is not one JSON value:\n" << r.out;
  ASSERT_TRUE(j.is_object() && j.size() == 1 && j.contains("error")) << b.file << ": " << r.out;
  EXPECT_EQ(j["error"].value("code", ""), b.code) << b.file << ": " << r.out;
  EXPECT_NE(j["error"].value("message", "").find(b.mentions), std::string::npos)
      << b.file << ": the message should name \"" << b.mentions << "\": " << r.out;
}

std::string test_name(const ::testing::TestParamInfo<BadInput>& info) {
  std::string name = info.param.name.empty() ? info.param.file.substr(0, info.param.file.find('.')) : info.param.name;
  if (info.param.backend != "reference") name += "_on_" + info.param.backend;
  for (char& c : name)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInputs, ::testing::ValuesIn(load_manifest()), test_name);

}  // namespace
