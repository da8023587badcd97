// settings_test.cpp: the settings a program runs with, resolved in one place
// (harness/settings.hpp): flags over the environment over the program's
// defaults. resolve_settings is given the environment as read_environment
// returns it, a map; the flags go through the built CLI (ATTN_ORACLE_CLI) with
// the variables set for it alone, and its report says what the run used.
// Also: every variable the programs read is documented, and the process-wide
// limits are installed by the edge, not read below it.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/model/environment.hpp"
#include "attn_oracle/harness/conformance_defaults.hpp"
#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;

// The settings every variable below leaves at the program's defaults.
void expect_default_settings(const Settings& s) {
  EXPECT_EQ(s.run.cases, 100);
  EXPECT_EQ(s.run.seed, kDefaultSeed);
  EXPECT_EQ(s.run.failures_dir, "attn-oracle-failures");
  EXPECT_EQ(s.run.draws.profile, SizeProfile::ci);
  EXPECT_FALSE(s.run.draws.shape_stable);
  EXPECT_TRUE(s.isolate);
  EXPECT_EQ(s.case_timeout_seconds, 120);
  EXPECT_EQ(s.worker_timeout_seconds, kDefaultWorkerTimeout);
  EXPECT_EQ(s.limits.memory_budget, kDefaultMemoryBudget);
}

TEST(Settings, WithoutTheEnvironmentTheDefaults) {
  const Settings s = resolve_settings({});
  expect_default_settings(s);
  EXPECT_EQ(s.run.max_size, 100);
  EXPECT_FALSE(s.run.use_store);
  EXPECT_EQ(s.limits.reference_threads, 0) << "the machine's cores";
  EXPECT_FALSE(s.store.has_value());
}

TEST(Settings, TheEnvironmentOverTheProgramsDefaults) {
  Settings defaults;
  defaults.run.failures_dir = "mine-failures";
  defaults.run.use_store = true;
  defaults.skips_file = "skips.txt";
  defaults.results_dir = "results";
  const Environment environment = {{"RC_PARAMS", "max_success=7 seed=3 max_size=500 verbose_progress=1"},
                                   {"ATTN_ORACLE_FAILURES_DIR", "elsewhere"},
                                   {"ATTN_ORACLE_PROFILE", "deep"},
                                   {"ATTN_ORACLE_SHAPE_STABLE", "1"},
                                   {"ATTN_ORACLE_XFAILS", "xfails.txt"},
                                   {"ATTN_ORACLE_ISOLATE", "0"},
                                   {"ATTN_ORACLE_CASE_TIMEOUT", "30"},
                                   {"ATTN_ORACLE_WORKER_TIMEOUT", "900"},
                                   {"ATTN_ORACLE_MEMORY_BUDGET", "512M"},
                                   {"ATTN_ORACLE_THREADS", "3"}};
  const Settings s = resolve_settings(environment, defaults);
  EXPECT_EQ(s.run.cases, 7);
  EXPECT_EQ(s.run.seed, 3u);
  EXPECT_EQ(s.run.max_size, 100) << "RapidCheck's size stays <= 100";
  EXPECT_EQ(s.rc_params, "max_success=7 seed=3 max_size=500 verbose_progress=1");
  EXPECT_EQ(s.run.failures_dir, "elsewhere");
  EXPECT_TRUE(s.run.use_store) << "the program's default, ATTN_ORACLE_STORE being unset";
  EXPECT_EQ(s.run.draws.profile, SizeProfile::deep);
  EXPECT_TRUE(s.run.draws.shape_stable);
  EXPECT_EQ(s.skips_file, "skips.txt") << "a default the environment does not touch stays";
  EXPECT_EQ(s.xfails_file, "xfails.txt");
  EXPECT_EQ(s.results_dir, "results");
  EXPECT_FALSE(s.isolate);
  EXPECT_EQ(s.case_timeout_seconds, 30);
  EXPECT_EQ(s.worker_timeout_seconds, 900);
  EXPECT_EQ(s.limits.memory_budget, int64_t{512} << 20);
  EXPECT_EQ(s.limits.reference_threads, 3);
}

TEST(Settings, TheStoreIsOffOnOrADirectory) {
  struct Reading {
    const char* store;
    bool on;
    const char* dir;
  };
  for (const Reading& r : {Reading{"off", false, "f"}, Reading{"0", false, "f"}, Reading{"", false, "f"},
                           Reading{"on", true, "f"}, Reading{"1", true, "f"}, Reading{"kept", true, "kept"}}) {
    Settings defaults;
    defaults.run.use_store = true;
    const Settings s = resolve_settings({{"ATTN_ORACLE_FAILURES_DIR", "f"}, {"ATTN_ORACLE_STORE", r.store}}, defaults);
    EXPECT_EQ(s.run.use_store, r.on) << "ATTN_ORACLE_STORE=" << r.store;
    EXPECT_EQ(s.run.failures_dir, r.dir) << "ATTN_ORACLE_STORE=" << r.store;
    EXPECT_EQ(s.store, std::optional<std::string>(r.store));
  }
}

TEST(Settings, AValueThatDoesNotParseLeavesTheDefault) {
  const Settings s = resolve_settings({{"RC_PARAMS", "max_success=many seed=x"},
                                       {"ATTN_ORACLE_PROFILE", "huge"},
                                       {"ATTN_ORACLE_SHAPE_STABLE", "off"},
                                       {"ATTN_ORACLE_ISOLATE", "no"},
                                       {"ATTN_ORACLE_CASE_TIMEOUT", "-5"},
                                       {"ATTN_ORACLE_WORKER_TIMEOUT", "0"},
                                       {"ATTN_ORACLE_MEMORY_BUDGET", "lots"},
                                       {"ATTN_ORACLE_FAILURES_DIR", ""}});
  expect_default_settings(s);
  for (const char* off : {"0", ""})
    EXPECT_FALSE(resolve_settings({{"ATTN_ORACLE_SHAPE_STABLE", off}}).run.draws.shape_stable) << off;
}

TEST(Settings, GoogleTestsShardIsTheShardOfTheDraws) {
  EXPECT_EQ(gtest_shard({{"GTEST_TOTAL_SHARDS", "3"}, {"GTEST_SHARD_INDEX", "1"}}), (Shard{1, 3}));
  EXPECT_EQ(gtest_shard({{"GTEST_TOTAL_SHARDS", "3"}}), std::nullopt);
  EXPECT_EQ(gtest_shard({{"GTEST_TOTAL_SHARDS", "3"}, {"GTEST_SHARD_INDEX", "3"}}), std::nullopt);
  EXPECT_EQ(gtest_shard({{"GTEST_TOTAL_SHARDS", "x"}, {"GTEST_SHARD_INDEX", "0"}}), std::nullopt);
  EXPECT_EQ(resolve_settings({{"GTEST_TOTAL_SHARDS", "3"}, {"GTEST_SHARD_INDEX", "1"}}).run.shard.count, 1)
      << "only a conformance binary takes GoogleTest's shard";
}

// A conformance binary: its compiled-in directories and lists under the
// environment, the failure store on, GoogleTest's shard on the draws.
// What an isolated child is given (isolation.hpp): every field survives the
// JSON form, and the shard has one spelling, 1-based, as --shard takes it.
TEST(Settings, RunSettingsRoundTripThroughTheirJson) {
  RunSettings s;
  s.cases = 7, s.max_size = 40, s.seed = UINT64_MAX, s.shard = Shard{2, 3}, s.max_failures = 1;
  s.draws.profile = SizeProfile::deep, s.draws.shape_stable = true;
  s.failures_dir = "dir with spaces", s.use_store = true, s.program = "vendor-conformance", s.draw_log = "/tmp/d.jsonl";
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["shard"], "3/3");
  EXPECT_EQ(to_json(run_settings_from_json(nlohmann::json::parse(j.dump()))), to_json(s));
  EXPECT_EQ(to_json(run_settings_from_json(nlohmann::json::object())), to_json(RunSettings{}));
  EXPECT_THROW(run_settings_from_json({{"shard", "0/3"}}), std::invalid_argument);
  EXPECT_THROW(run_settings_from_json({{"profile", "huge"}}), std::invalid_argument);
  EXPECT_THROW(run_settings_from_json({{"cases", "many"}}), nlohmann::json::exception);

  ResumePoint r;
  r.first_draw = 12, r.known_signatures = {"crash", "wrong answer"}, r.replay_store = false;
  EXPECT_EQ(to_json(resume_point_from_json(to_json(r))), to_json(r));
}

TEST(Settings, AShardIsIOverNWithOneBasedI) {
  EXPECT_EQ(parse_shard("1/1"), (Shard{0, 1}));
  EXPECT_EQ(parse_shard("3/4"), (Shard{2, 4}));
  for (const char* bad : {"0/2", "3/2", "1/0", "-1/2", "1/", "/2", "1", "a/b", "1/2x", "2147483648/2147483647"})
    EXPECT_EQ(parse_shard(bad), std::nullopt) << bad;
  EXPECT_EQ(to_string(Shard{1, 3}), "2/3");
  EXPECT_EQ(draws_in_shard(10, Shard{0, 3}), 4);
  EXPECT_EQ(draws_in_shard(10, Shard{2, 3}), 3);
  EXPECT_EQ(draws_in_shard(2, Shard{2, 3}), 0);
}

TEST(Settings, AConformanceBinarysDefaultsUnderTheEnvironment) {
  set_conformance_defaults({"/build/x-failures", "/build/x-results", "/src/xfails.txt", "/src/skips.txt", ""});
  Settings s = conformance_settings({{"ATTN_ORACLE_SKIPS", "mine.txt"}, {"GTEST_TOTAL_SHARDS", "2"}, {"GTEST_SHARD_INDEX", "0"}});
  EXPECT_EQ(s.run.failures_dir, "/build/x-failures");
  EXPECT_EQ(s.results_dir, "/build/x-results");
  EXPECT_EQ(s.xfails_file, "/src/xfails.txt");
  EXPECT_EQ(s.skips_file, "mine.txt");
  EXPECT_TRUE(s.run.use_store);
  EXPECT_EQ(s.run.shard, (Shard{0, 2}));
  EXPECT_FALSE(conformance_settings({{"ATTN_ORACLE_STORE", "off"}}).run.use_store);
  set_conformance_defaults({});
}

TEST(Settings, TheProcessLimitsAreInstalledByTheEdge) {
  Settings s;
  s.limits = {int64_t{64} << 20, 2};
  s.worker_timeout_seconds = 5;
  install_process_settings(s);
  EXPECT_EQ(memory_budget(), int64_t{64} << 20);
  EXPECT_EQ(reference_threads(), 2);
  EXPECT_EQ(worker_timeout_seconds(), 5);
  install_process_settings(Settings{});
  EXPECT_EQ(memory_budget(), kDefaultMemoryBudget);
  EXPECT_EQ(worker_timeout_seconds(), kDefaultWorkerTimeout);
}

// Every variable a program reads says what it does, and the docs list it.
TEST(Settings, EveryVariableIsDocumented) {
  std::string docs;
  for (const char* page : {"/../docs/vendoring.md", "/../docs/python.md", "/../docs/protocol.md", "/../README.md"}) {
    std::ifstream in(std::string(ATTN_ORACLE_FIXTURES_DIR) + page);
    docs += std::string(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(docs.size(), 1000u);
  for (const EnvironmentVariable& v : environment_variables()) {
    EXPECT_GT(v.meaning.size(), 10u) << v.name;
    EXPECT_NE(docs.find(std::string(v.name)), std::string::npos) << v.name << " is read but documented nowhere";
  }
}

// ------------------------------------------------------------ flags, through the CLI

// `attn-oracle check ARGS` in `dir` with the variables in `env` and no other
// documented one; the settings of the report it wrote to dir/report.
nlohmann::json check_report(const fs::path& dir, const std::string& env, const std::string& args) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string unset;
  for (const EnvironmentVariable& v : environment_variables())
    if (!v.name.ends_with('*')) unset += " -u " + std::string(v.name);  // a prefix: none is set in a test
  const std::string command = "cd '" + dir.string() + "' && env" + unset + " " + env + " '" + ATTN_ORACLE_CLI +
                              "' check --backend reference --filter metadata/matchesReference --no-isolation --report '" +
                              (dir / "report").string() + "' " + args + " >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  std::ifstream in(dir / "report" / "conformance.json");
  return nlohmann::json::parse(in, nullptr, false)["settings"];
}

TEST(Settings, FlagsOverTheEnvironmentOverTheDefaults) {
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_settings_test";
  const std::string env = "RC_PARAMS='max_success=3 seed=11' ATTN_ORACLE_PROFILE=deep ATTN_ORACLE_STORE=off "
                          "ATTN_ORACLE_FAILURES_DIR='" + (dir / "from-env").string() + "'";
  const nlohmann::json by_env = check_report(dir / "env", env, "");
  EXPECT_EQ(by_env["cases"], 3);
  EXPECT_EQ(by_env["seed"], 11);
  EXPECT_EQ(by_env["max_size"], 100) << "the default";
  EXPECT_EQ(by_env["profile"], "deep");
  EXPECT_EQ(by_env["store"], false);
  EXPECT_EQ(by_env["failures_dir"], (dir / "from-env").string());
  const nlohmann::json by_flags =
      check_report(dir / "flags", env, "--cases 2 --profile ci --shape-stable --store '" + (dir / "kept").string() + "'");
  EXPECT_EQ(by_flags["cases"], 2);
  EXPECT_EQ(by_flags["seed"], 11) << "no flag: the environment's";
  EXPECT_EQ(by_flags["profile"], "ci, shape-stable draws");
  EXPECT_EQ(by_flags["store"], true);
  EXPECT_EQ(by_flags["failures_dir"], (dir / "kept").string());
  const nlohmann::json by_defaults = check_report(dir / "defaults", "", "");
  EXPECT_EQ(by_defaults["cases"], 100);
  EXPECT_EQ(by_defaults["seed"], kDefaultSeed);
  EXPECT_EQ(by_defaults["profile"], "ci");
  EXPECT_EQ(by_defaults["store"], true) << "check keeps its failures unless told otherwise";
}

}  // namespace
}  // namespace attn_oracle
