// cli_test.cpp: runs the built `attn-oracle` binary (ATTN_ORACLE_CLI) through
// popen on fixtures and checks exit codes and stdout: eval prints parseable JSON
// (exit 0), a rejected input prints only {"error": {...}} (exit 2), replay prints
// PASS (exit 0), FAIL (exit 3) or SKIP (exit 4), re-running the property a
// counterexample records; usage errors and unknown backends exit 1.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

struct CliRun {
  int status = -1;
  std::string out;  // stdout only; stderr is discarded
};

CliRun run_cli(const std::string& args) {
  const std::string command = std::string("'") + ATTN_ORACLE_CLI + "' " + args + " 2>/dev/null";
  CliRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string fixture(const std::string& name) {
  return std::string("'") + ATTN_ORACLE_FIXTURES_DIR + "/design/" + name + ".case.json'";
}

// A case file in the temp directory, for inputs no fixture holds.
std::string temp_case(const std::string& name, const json& j) {
  const auto path = std::filesystem::temp_directory_path() / "attn_oracle_cli_test" / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << j.dump();
  return "'" + path.string() + "'";
}

TEST(Cli, EvalPrintsMetadataJson) {
  const CliRun r = run_cli("eval " + fixture("ex1"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["cu_seqlens_q"], json::parse("[0, 3, 5]"));
  EXPECT_EQ(j["q_seqlens"], json::parse("[[3, 2, 0]]"));
}

TEST(Cli, EvalOfAnInvalidInputPrintsOnlyTheError) {
  const CliRun r = run_cli("eval --backend reference " + fixture("ex4"));
  ASSERT_EQ(r.status, 2) << r.out;
  const json j = json::parse(r.out);  // nothing else on stdout
  EXPECT_EQ(j["error"]["code"], "too_many_segments");
  EXPECT_TRUE(j["error"]["message"].is_string());
}

TEST(Cli, EvalOfAnUnreadableCaseIsRejected) {
  const CliRun r = run_cli("eval " + temp_case("bad_mask.case.json",
                                            {{"schema", "attn-oracle.case/1"},
                                             {"op", "metadata"},
                                             {"mask", "diagonal"}}));
  ASSERT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "bad_mask");
}

TEST(Cli, EvalPrintsAttentionJson) {
  json c = json::parse(R"({"schema": "attn-oracle.case/1", "op": "attention",
      "mask": "causal_bottom_right", "max_segments": 1,
      "q": {"segment_ids": [[1, 1, 1, 1]], "segment_pos": [[0, 1, 2, 3]]},
      "kv": {"segment_ids": [[1, 1]], "segment_pos": [[0, 1]]},
      "heads_q": 1, "heads_kv": 1, "head_dim": 2, "dtype": "fp32", "data": {"seed": 1}})");
  const CliRun r = run_cli("eval " + temp_case("ex8_attention.case.json", c));
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["o"][0].size(), 4u);                  // [B][Tq][Hq][D]
  EXPECT_EQ(j["lse"][0][0][0], "-inf");  // q0 attends nothing (docs/semantics.md#10-worked-examples, ex8)
  EXPECT_EQ(j["o"][0][1][0], json::parse("[0.0, 0.0]"));
}

TEST(Cli, ReplayPasses) {
  for (const char* name : {"ex1", "ex5b", "ex9_broadcast", "ex9_extra_dims_mismatch"}) {
    const CliRun r = run_cli("replay " + fixture(name));
    EXPECT_EQ(r.status, 0) << name << ": " << r.out;
    EXPECT_EQ(r.out.substr(0, 5), "PASS\n") << name << ": " << r.out;
  }
}

TEST(Cli, ReplayFailsWhenExpectedDisagrees) {
  std::ifstream in(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/design/ex1.case.json");
  json c = json::parse(in);
  c["expected"]["q_seqlens"] = json::parse("[[3, 1, 0]]");
  const CliRun r = run_cli("replay " + temp_case("ex1_wrong.case.json", c));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_EQ(r.out.substr(0, 5), "FAIL\n");
  EXPECT_NE(r.out.find("expected"), std::string::npos) << r.out;
}

json read_fixture(const std::string& relative) {
  std::ifstream in(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/" + relative);
  return json::parse(in);
}

// A counterexample re-runs the property it records, with the values it drew:
// here the code the generator planted. On the reference it holds; with the
// drawn code changed it fails with the property's id and its message.
TEST(Cli, ReplayReRunsTheRecordedProperty) {
  json c = read_fixture("regressions/reappear_after_padding_accepted.case.json");
  ASSERT_EQ(c["property"]["id"], "metadata/rejectsInvalidInputsWithTheirCode");
  CliRun r = run_cli("replay --backend reference " + temp_case("recorded.case.json", c));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("metadata/rejectsInvalidInputsWithTheirCode holds on this case"), std::string::npos) << r.out;
  c["property"]["drawn"]["expected_code"] = "too_many_segments";
  r = run_cli("replay --backend reference " + temp_case("recorded_wrong_code.case.json", c));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_EQ(r.out.substr(0, 5), "FAIL\n") << r.out;
  EXPECT_NE(r.out.find("\n  metadata/rejectsInvalidInputsWithTheirCode: gave noncontiguous_segment"), std::string::npos)
      << r.out;
}

// Without --backend, replay uses the backend the case records when this build has it.
TEST(Cli, ReplayDefaultsToTheRecordedBackend) {
  json c = read_fixture("regressions/reappear_after_padding_accepted.case.json");
  c["property"]["backend"] = "cpu";
  const CliRun r = run_cli("replay " + temp_case("recorded_cpu.case.json", c));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("on backend cpu"), std::string::npos) << r.out;
}

// Nothing judged is not a pass: an attention case the kernels' index rule cannot
// represent (a causal query at position 1 of a run that starts there) is SKIP on cpu.
TEST(Cli, ReplayOfAnUnjudgeableCaseExitsFour) {
  const json c = json::parse(R"({"schema": "attn-oracle.case/2", "op": "attention", "mask": "causal",
      "max_segments": 1, "q": {"segment_ids": [[1]], "segment_pos": [[1]]},
      "kv": {"segment_ids": [[1, 1]], "segment_pos": [[0, 1]]},
      "heads_q": 1, "heads_kv": 1, "head_dim": 2, "dtype": "fp32", "data": {"seed": 1}})");
  const CliRun r = run_cli("replay --backend cpu " + temp_case("not_representable.case.json", c));
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_EQ(r.out.substr(0, 5), "SKIP\n") << r.out;
  EXPECT_NE(r.out.find("not representable"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli("replay --backend reference " + temp_case("not_representable.case.json", c)).status, 0);
}

TEST(Cli, UsageErrorsExitOne) {
  EXPECT_EQ(run_cli("eval --backend no_such_backend " + fixture("ex1")).status, 1);
  EXPECT_EQ(run_cli("replay --backend no_such_backend " + fixture("ex1")).status, 1);
  EXPECT_EQ(run_cli("eval").status, 1);
  EXPECT_EQ(run_cli("frobnicate").status, 1);
  EXPECT_EQ(run_cli("").status, 1);
  const CliRun help = run_cli("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("usage"), std::string::npos);
}

// `COMMAND --help` is a request for the usage, not an unknown option.
TEST(Cli, HelpAfterACommandPrintsTheUsage) {
  for (const char* args : {"check --help", "check -h", "eval --help", "replay --backend reference --help"}) {
    const CliRun help = run_cli(args);
    EXPECT_EQ(help.status, 0) << args;
    EXPECT_NE(help.out.find("usage: "), std::string::npos) << args << ": " << help.out;
  }
}

TEST(Cli, CheckListPrintsThePropertyIdsAndRunsNothing) {
  const CliRun all = run_cli("check --list");
  ASSERT_EQ(all.status, 0);
  EXPECT_EQ(all.out.rfind("metadata/matchesReference\n", 0), 0u) << all.out;
  EXPECT_EQ(all.out.find("passed"), std::string::npos) << "nothing runs: " << all.out;
  const CliRun some = run_cli("check --list --filter small_seq/");
  ASSERT_EQ(some.status, 0);
  EXPECT_EQ(some.out.find("metadata/"), std::string::npos) << some.out;
  EXPECT_NE(some.out.find("small_seq/"), std::string::npos) << some.out;
  EXPECT_EQ(run_cli("check --list --filter no_such/").status, 1);
}

TEST(Cli, CheckDescribePrintsEachPropertyWithWhatItChecks) {
  const CliRun kv = run_cli("check --describe --filter kv_buffer/");
  ASSERT_EQ(kv.status, 0);
  EXPECT_NE(kv.out.find("kv_buffer/metadataIsCanonical\n    every micro-sequence's cu_seqlens start at 0"),
            std::string::npos) << kv.out;
  std::istringstream lines(kv.out);
  int ids = 0;
  for (std::string id, summary; std::getline(lines, id) && std::getline(lines, summary); ++ids) {
    EXPECT_EQ(id.rfind("kv_buffer/", 0), 0u) << id;
    EXPECT_GT(summary.size(), 20u) << id << ": " << summary;
    EXPECT_EQ(summary.rfind("    ", 0), 0u) << summary;
  }
  EXPECT_EQ(ids, 6) << kv.out;
}

TEST(Cli, BackendsListsTheReference) {
  const CliRun r = run_cli("backends");
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("reference\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata"), std::string::npos) << r.out;
}

}  // namespace
