// check_command_test.cpp: `check` in process (harness/check.hpp) on the
// reference and on planted backends: report files identical for the same seed
// (times aside), a failure exits 1 with its counterexample, the skips and
// expected-failure lists (a listed failure is xfail, a listed pass is XPASS and
// fails the run), a filter that matches nothing is an error and one of several
// prefixes runs each one's properties, two shards merged give the totals of one
// unsharded run (and the sum of their worker starts), a backend whose answers alternate is
// reported as nondeterministic, several distinct bugs of one property are all
// reported, a property whose every draw is declined is skipped with the
// reason, and SIGINT stops after the running property with a partial report.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/harness/cli.hpp"
#include "attn_oracle/harness/test_lists.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "builtin_backends.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::temp_directory_path() / "attn_oracle_check_command_test";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path write_list(const std::string& name, const std::string& text) {
  fs::create_directories(kDir);
  std::ofstream(kDir / name) << text;
  return kDir / name;
}

// The planted metadata bug of `property`, registered under its backend's name.
std::string planted(const std::string& bug_name) {
  for (planted::PlantedBug& b : planted::metadata_bugs())
    if (b.name == bug_name) {
      const std::string name = b.make()->name();
      BackendRegistry::instance().add(name, b.make);
      return name;
    }
  return "";
}

const bool kBuiltinsRegistered = (register_builtin_backends(), true);

CheckOptions options(const std::string& backend, const std::string& report, const std::string& filter = "metadata/") {
  CheckOptions o;
  o.backend = backend;
  o.filter = filter;
  o.cases = 20;
  o.seed = 7;
  o.isolate = false;  // this test binary does not speak the child verbs (tests/isolation_test.cpp does)
  o.no_store = true;  // the same result every run: nothing replayed from an earlier one (failure_store_test.cpp)
  o.report_dir = (kDir / report).string();
  return o;
}

int check(const CheckOptions& o) { return run_check_command(o, CheckEnvironment{}); }

json report_json(const std::string& report) { return json::parse(slurp(kDir / report / "conformance.json")); }

const json* result(const json& report, const std::string& id) {
  for (const json& r : report["results"])
    if (r["id"] == id) return &r;
  return nullptr;
}

// The report without what depends on the clock.
std::string timeless(std::string text) {
  text = std::regex_replace(text, std::regex("\"(seconds|total|in_backend|suite_ms|backend_ms)\": [0-9.e-]+"),
                            "\"$1\": 0");
  text = std::regex_replace(text, std::regex("[0-9]+\\.[0-9]+ (ms|draws/s)\\b"), "T $1");
  return std::regex_replace(text, std::regex("[0-9]+\\.[0-9]+ s\\b"), "T s");
}

TEST(CheckCommand, ReportsAreTheSameForTheSameSeed) {
  for (const std::string& backend : {std::string("reference"), planted("offsets_from_seqlens")}) {
    check(options(backend, "a"));
    check(options(backend, "b"));
    for (const char* file : {"conformance.md", "conformance.json"})
      EXPECT_EQ(timeless(slurp(kDir / "a" / file)), timeless(slurp(kDir / "b" / file))) << backend << " " << file;
  }
}

TEST(CheckCommand, ReportHoldsVersionsSettingsAndPerPropertyCounts) {
  EXPECT_EQ(check(options("reference", "ref")), 0);
  const json j = report_json("ref");
  EXPECT_EQ(j["schema"], "attn-oracle.conformance/2");
  for (const char* k : {"attn-oracle", "commit", "compiler"}) EXPECT_TRUE(j["versions"].contains(k)) << k;
  EXPECT_EQ(j["settings"]["seed"], 7);
  EXPECT_EQ(j["settings"]["cases"], 20);
  EXPECT_EQ(j["settings"]["profile"], "ci");
  EXPECT_NE(slurp(kDir / "ref" / "conformance.md").find("size profile ci"), std::string::npos);
  ASSERT_FALSE(j["results"].empty());
  for (const json& r : j["results"]) {
    EXPECT_EQ(r["verdict"], "passed") << r["id"];
    EXPECT_EQ(r["draws"]["total"], 20) << r["id"];
    EXPECT_EQ(r["backend_version"], "float64 explicit-mask oracle");
    EXPECT_GT(r["mix"].size(), 0u) << r["id"];
    EXPECT_TRUE(r.contains("seconds"));
    EXPECT_GT(r["draw_seconds"]["total"].get<double>(), 0.0) << r["id"];
    EXPECT_GE(r["draw_seconds"]["in_backend"].get<double>(), 0.0) << r["id"];
  }
  EXPECT_FALSE(j["interrupted"]);
  // What a draw cost, the suite's part and the backend's: in the JSON and the summary.
  ASSERT_EQ(j["cost_per_draw"].size(), 1u);
  EXPECT_EQ(j["cost_per_draw"][0]["backend"], "reference");
  EXPECT_EQ(j["cost_per_draw"][0]["draws"], 20 * j["results"].size());
  EXPECT_GT(j["cost_per_draw"][0]["suite_ms"].get<double>(), 0.0);
  EXPECT_NE(slurp(kDir / "ref" / "conformance.md").find("cost per draw on reference: "), std::string::npos);
}

TEST(CheckCommand, AFailureExitsOneWithItsCounterexample) {
  const std::string backend = planted("offsets_from_seqlens");
  EXPECT_EQ(check(options(backend, "fail")), 1);
  const json report = report_json("fail");
  const json* r = result(report, backend + "/metadata/shiftingARowShiftsItsOffsets");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ((*r)["verdict"], "FAILED");
  ASSERT_FALSE((*r)["failures"].empty());
  const json& f = (*r)["failures"][0];
  EXPECT_TRUE(fs::exists(f["counterexample"].get<std::string>()));
  EXPECT_NE(f["replay"].get<std::string>().find("attn-oracle replay --backend " + backend), std::string::npos);
  EXPECT_NE(f["rerun"].get<std::string>().find("--seed 7"), std::string::npos);
}

TEST(CheckCommand, ListsSkipExpectFailuresAndWarn) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions o = options("all", "lists");
  o.xfails_file = write_list("xfails.txt", "# known bugs\n" + backend + "/metadata/shiftingARowShiftsItsOffsets  # offsets from seqlens\n").string();
  o.skips_file = write_list("skips.txt", "cpu/\nnosuch/backend\nmetadata/extraDimsEqualSliceBySlice  # not ours\n").string();
  const int status = check(o);
  const json j = report_json("lists");
  for (const json& r : j["results"]) {
    const std::string id = r["id"];
    if (id.rfind("cpu/", 0) == 0 || id.ends_with("/metadata/extraDimsEqualSliceBySlice")) {
      EXPECT_EQ(r["verdict"], "skipped") << id;
    }
    if (id == backend + "/metadata/shiftingARowShiftsItsOffsets") {
      EXPECT_EQ(r["verdict"], "xfail") << id;
      EXPECT_NE(r["note"].get<std::string>().find("offsets from seqlens"), std::string::npos);
    }
  }
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"].dump();
  EXPECT_NE(j["warnings"][0].get<std::string>().find("nosuch/backend matches no test"), std::string::npos);
  // The planted backend fails other metadata properties too: those still fail the run.
  EXPECT_EQ(status, j["summary"]["FAILED"].get<int>() > 0 ? 1 : 0);
}

// A listed expected failure that passes fails the run (strict), so the list cannot rot.
TEST(CheckCommand, AnExpectedFailureThatPassesFailsTheRun) {
  CheckOptions o = options("reference", "xpass", "metadata/matchesReference");
  o.xfails_file = write_list("xpass.txt", "metadata/matchesReference  # fixed long ago\n").string();
  EXPECT_EQ(check(o), 1);
  const json report = report_json("xpass");
  const json* r = result(report, "reference/metadata/matchesReference");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ((*r)["verdict"], "XPASS");
  // version= limits an entry to the backend versions it names.
  o.xfails_file = write_list("xpass_version.txt", "metadata/matchesReference version=9.99  # another release\n").string();
  EXPECT_EQ(check(o), 0);
}

// arch= limits an entry to runs on the architectures it names: the backend's arch(), or
// ATTN_ORACLE_ARCH (Settings::arch) over it (a CI job on a GPU runner; fake values here).
TEST(CheckCommand, AnArchKeyLimitsAnEntryToThoseArchitectures) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions o = options(backend, "arch", "metadata/shiftingARowShiftsItsOffsets");
  o.xfails_file = write_list("xfails_arch.txt", "metadata/shiftingARowShiftsItsOffsets arch=sm_90,sm_90a  # wgmma only\n").string();
  const auto verdict_on = [&](const char* arch) {
    CheckEnvironment env;
    env.settings.arch = arch ? arch : "";
    const int status = run_check_command(o, env);
    const json report = report_json("arch");
    return std::pair{status, (*result(report, backend + "/metadata/shiftingARowShiftsItsOffsets"))["verdict"]};
  };
  EXPECT_EQ(verdict_on("sm_90a"), std::pair(0, json("xfail")));
  EXPECT_EQ(verdict_on("sm_80"), std::pair(1, json("FAILED")));
  EXPECT_EQ(verdict_on(nullptr), std::pair(1, json("FAILED"))) << "a backend without an architecture matches no arch= entry";
  std::string error;
  EXPECT_FALSE(TestIdList::read(write_list("bad_arch.txt", "metadata/ arch=\n").string(), error));
  EXPECT_NE(error.find("[arch=A[,B...]]"), std::string::npos) << error;
}

TEST(CheckCommand, AFilterThatMatchesNothingIsAnError) {
  EXPECT_EQ(check(options("reference", "nothing", "nosuchproperty")), 1);
}

TEST(CheckCommand, AFilterOfSeveralPrefixesRunsThePropertiesOfEach) {
  EXPECT_EQ(check(options("reference", "several", "metadata/matchesReference,attention/matchesRef")), 0);
  const json report = report_json("several");
  std::vector<std::string> ran;
  for (const json& r : report["results"]) ran.push_back(r["property"]);
  EXPECT_EQ(ran, (std::vector<std::string>{"metadata/matchesReference", "attention/matchesReference"}));
}

// A backend without a worker reports no starts; shards merged add theirs up.
TEST(CheckCommand, WorkerStartsAreReportedAndMergedShardsAddThemUp) {
  CheckOptions part = options("reference", "starts0", "metadata/matchesReference");
  for (int i = 0; i < 2; ++i) {
    part.report_dir = (kDir / ("starts" + std::to_string(i))).string();
    part.shard = Shard{i, 2};
    check(part);
    json j = report_json("starts" + std::to_string(i));
    EXPECT_FALSE(j["backends"][0].contains("worker_starts"));
    j["backends"][0]["worker_starts"] = {{"total", 2 + i}, {"restarts", 1 + i}};  // as a process backend's shard says
    std::ofstream(kDir / ("starts" + std::to_string(i)) / "conformance.json") << j.dump();
  }
  ASSERT_EQ(run_cli({"report", "merge", "--out", (kDir / "starts").string(), (kDir / "starts0").string(),
                     (kDir / "starts1").string()},
                    CheckEnvironment{}),
            0);
  EXPECT_EQ(report_json("starts")["backends"][0]["worker_starts"], (json{{"total", 5}, {"restarts", 3}}));
  EXPECT_NE(slurp(kDir / "starts" / "conformance.md").find("worker starts: 5 (3 restarts after a crash, a hang or a protocol error)"),
            std::string::npos);
}

// Two shards, each with its report, merged: the same per-property totals as one
// unsharded run of the same seed and case count.
TEST(CheckCommand, TwoShardsMergedEqualOneRun) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions whole = options("all", "whole");
  whole.backend = backend;
  check(whole);
  for (int i = 0; i < 2; ++i) {
    CheckOptions part = whole;
    part.report_dir = (kDir / ("shard" + std::to_string(i))).string();
    part.shard = Shard{i, 2};
    check(part);
  }
  const CheckEnvironment env;
  ASSERT_EQ(run_cli({"report", "merge", "--out", (kDir / "merged").string(), (kDir / "shard0" / "conformance.json").string(),
                     (kDir / "shard1" / "conformance.json").string()},
                    env),
            0);
  const json one = report_json("whole"), merged = report_json("merged");
  EXPECT_EQ(merged["summary"], one["summary"]);
  EXPECT_EQ(merged["settings"]["shards"], json::array({"1/2", "2/2"}));
  ASSERT_EQ(merged["results"].size(), one["results"].size());
  for (size_t i = 0; i < one["results"].size(); ++i) {
    const json &a = one["results"][i], &b = merged["results"][i];
    EXPECT_EQ(a["id"], b["id"]);
    EXPECT_EQ(a["verdict"], b["verdict"]) << a["id"];
    EXPECT_EQ(a["draws"], b["draws"]) << a["id"];
    EXPECT_EQ(a["decline_reasons"], b["decline_reasons"]) << a["id"];
    EXPECT_EQ(a["mix"], b["mix"]) << a["id"];
  }
  // Shards drawn from different size profiles are different runs.
  json deep = report_json("shard1");
  deep["settings"]["profile"] = "deep";
  std::ofstream(kDir / "shard1" / "conformance.json") << deep.dump();
  EXPECT_NE(run_cli({"report", "merge", "--out", (kDir / "merged").string(), (kDir / "shard0" / "conformance.json").string(),
                     (kDir / "shard1" / "conformance.json").string()},
                    env),
            0);
}

// A metadata backend whose every other answer is the reference's with one
// cu_seqlens_kv entry off: two identical calls disagree.
class AlternatingBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "alternating"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    auto md = make_reference_backend()->metadata()->metadata(batch);
    if (md && (calls_++ % 2 == 1)) {
      Metadata wrong = md.value();
      wrong.cu_seqlens_kv.back() += 1;
      return wrong;
    }
    return md;
  }

 private:
  int calls_ = 0;
};

TEST(CheckCommand, AlternatingResultsAreReportedAsNondeterministic) {
  BackendRegistry::instance().add("alternating", [] { return std::make_unique<AlternatingBackend>(); });
  EXPECT_EQ(check(options("alternating", "alternating", "metadata/matchesReference")), 1);
  const json report = report_json("alternating");
  const json* r = result(report, "alternating/metadata/matchesReference");
  ASSERT_NE(r, nullptr);
  ASSERT_FALSE((*r)["failures"].empty());
  const json& f = (*r)["failures"][0];
  EXPECT_TRUE(f["nondeterministic"].get<bool>()) << f.dump();
  EXPECT_NE(f["message"].get<std::string>().find("nondeterministic backend: cu_seqlens_kv["), std::string::npos) << f.dump();
  EXPECT_NE(f["message"].get<std::string>().find("differs between two identical calls"), std::string::npos) << f.dump();
}

// A metadata backend with one per-slot count off: row 1's first q_seqlens slot.
class SecondRowSlotZeroBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "second-row-slot-zero"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    auto md = make_reference_backend()->metadata()->metadata(batch);
    if (md && md->batch > 1) md.value().q_seqlens[md->max_segments] += 1;
    return md;
  }
};

// Per-slot fields are [..., B, M] arrays: a message gives the index into that
// shape and says which row and slot it is, never the flat offset.
TEST(CheckCommand, PerSlotDifferencesNameTheRowAndSlot) {
  BackendRegistry::instance().add("second-row-slot-zero", [] { return std::make_unique<SecondRowSlotZeroBackend>(); });
  EXPECT_EQ(check(options("second-row-slot-zero", "second-row-slot-zero", "metadata/matchesReference")), 1);
  const json report = report_json("second-row-slot-zero");
  const json* r = result(report, "second-row-slot-zero/metadata/matchesReference");
  ASSERT_NE(r, nullptr);
  ASSERT_FALSE((*r)["failures"].empty()) << r->dump();
  const std::string message = (*r)["failures"][0]["message"];
  EXPECT_NE(message.find("q_seqlens[1, 0] (row 1, slot 0): backend "), std::string::npos) << message;
}

// A backend that declines every input: the property is skipped with the reason, never passed.
class DecliningBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "declining"; }
  MetadataCapability* metadata() override { return this; }
  std::optional<std::string> unsupported(const PackedBatch&) override { return "we only take B = 0"; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return make_reference_backend()->metadata()->metadata(batch); }
};

TEST(CheckCommand, AWhollyDeclinedPropertyIsSkippedWithItsReason) {
  BackendRegistry::instance().add("declining", [] { return std::make_unique<DecliningBackend>(); });
  EXPECT_EQ(check(options("declining", "declining", "metadata/matchesReference")), 0);
  const json report = report_json("declining");
  const json* r = result(report, "declining/metadata/matchesReference");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ((*r)["verdict"], "skipped");
  EXPECT_EQ((*r)["draws"]["declined"], 20);
  EXPECT_FALSE((*r)["wholly_declined"].empty());
}

// Reasons are grouped with their numbers blanked ("head_dim 96" with "head_dim
// 40"), but what people read is one real message, digits and all.
TEST(CheckCommand, DeclineReasonsKeepTheirDigitsWhereTheyAreShown) {
  BackendRegistry::instance().add("declining", [] { return std::make_unique<DecliningBackend>(); });
  check(options("declining", "declining-digits", "metadata/matchesReference"));
  const json report = report_json("declining-digits");
  const json* r = result(report, "declining/metadata/matchesReference");
  ASSERT_NE(r, nullptr);
  EXPECT_NE((*r)["message"].get<std::string>().find("we only take B = 0"), std::string::npos) << r->dump();
  const std::string md = slurp(kDir / "declining-digits" / "conformance.md");
  EXPECT_NE(md.find("declined 20x: unsupported: we only take B = 0"), std::string::npos) << md;
  EXPECT_EQ(md.find("B = #"), std::string::npos) << md;
}

// A metadata backend that presses Ctrl-C once, during its first case.
class InterruptingBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "interrupting"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    if (!pressed_) std::raise(SIGINT);
    pressed_ = true;
    return make_reference_backend()->metadata()->metadata(batch);
  }

 private:
  bool pressed_ = false;
};

TEST(CheckCommand, SigintStopsAfterTheRunningPropertyAndWritesAPartialReport) {
  BackendRegistry::instance().add("interrupting", [] { return std::make_unique<InterruptingBackend>(); });
  EXPECT_EQ(check(options("interrupting", "interrupted")), 130);
  const json j = report_json("interrupted");
  EXPECT_TRUE(j["interrupted"]);
  EXPECT_EQ(j["results"].size(), 1u);
  EXPECT_NE(slurp(kDir / "interrupted" / "conformance.md").find("Interrupted"), std::string::npos);
  EXPECT_EQ(std::signal(SIGINT, SIG_DFL), SIG_DFL);  // the previous handler is back
}

// ---------------------------------------------------------------- CI output (ci_output.hpp)

TEST(CheckCommand, JunitXmlHasATestCasePerPropertyAndEachFailureWithItsCaseAndReplayLines) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions o = options(backend, "junit");
  o.junit_xml = (kDir / "junit.xml").string();
  EXPECT_EQ(check(o), 1);
  const std::string xml = slurp(kDir / "junit.xml");
  const json report = report_json("junit");
  size_t testcases = 0;
  for (size_t at = xml.find("<testcase "); at != std::string::npos; at = xml.find("<testcase ", at + 1)) ++testcases;
  EXPECT_EQ(testcases, report["results"].size());
  EXPECT_NE(xml.find("<testsuite name=\"" + backend + "\""), std::string::npos);
  const std::string failing = "name=\"metadata/shiftingARowShiftsItsOffsets\"";
  const size_t at = xml.find(failing);
  ASSERT_NE(at, std::string::npos) << xml;
  const std::string testcase = xml.substr(at, xml.find("</testcase>", at) - at);
  const json& f = (*result(report, backend + "/metadata/shiftingARowShiftsItsOffsets"))["failures"][0];
  EXPECT_NE(testcase.find("<failure type=\"FAILED\""), std::string::npos) << testcase;
  EXPECT_NE(testcase.find(f["counterexample"].get<std::string>()), std::string::npos) << testcase;
  EXPECT_NE(testcase.find("replay: "), std::string::npos) << testcase;
  for (const json& r : report["results"])
    if (r["verdict"] == "passed") {
      const size_t passing = xml.find("name=\"" + r["property"].get<std::string>() + "\"");
      ASSERT_NE(passing, std::string::npos);
      EXPECT_GT(xml.find("<failure", passing), xml.find("</testcase>", passing)) << "a passing property has no <failure>";
    }
  // Times aside, the same seed writes the same bytes.
  check(o);
  const std::regex time("time=\"[0-9.]+\"");
  EXPECT_EQ(std::regex_replace(xml, time, ""), std::regex_replace(slurp(kDir / "junit.xml"), time, ""));
}

TEST(CheckCommand, GithubAnnotationsAreAnErrorLinePerFailureNamingItsCaseFile) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions o = options(backend, "annotations");
  o.github_annotations = true;
  testing::internal::CaptureStdout();
  EXPECT_EQ(check(o), 1);
  const std::string out = testing::internal::GetCapturedStdout();
  const json report = report_json("annotations");
  const json& f = (*result(report, backend + "/metadata/shiftingARowShiftsItsOffsets"))["failures"][0];
  std::string line;
  for (std::istringstream lines(out); std::getline(lines, line);)
    if (line.starts_with("::error ") && line.find("shiftingARowShiftsItsOffsets") != std::string::npos) break;
  ASSERT_TRUE(line.starts_with("::error file=")) << out;
  // The file relative to the working directory when under it (GitHub's workspace), the title
  // with ':' and ',' escaped, the message one line with the replay line after %0A.
  const std::string file = fs::path(f["counterexample"].get<std::string>()).lexically_relative(fs::current_path()).string();
  const std::string shown = file.starts_with("..") ? f["counterexample"].get<std::string>() : file;
  EXPECT_NE(line.find("file=" + shown + ","), std::string::npos) << line;
  EXPECT_NE(line.find(",title=" + backend + "/metadata/shiftingARowShiftsItsOffsets::"), std::string::npos) << line;
  EXPECT_NE(line.find("%0Areplay: "), std::string::npos) << line;
  for (const json& r : report["results"]) {
    if (r["verdict"] == "passed") {
      EXPECT_EQ(out.find("title=" + r["id"].get<std::string>() + "::"), std::string::npos) << out;
    }
  }
}

// --log-draws (runner/draw_log.hpp): a Hypothesis "test_case" line per search draw whose
// statuses add up to the report's counts, failures with their message as the reason.
TEST(CheckCommand, TheDrawLogHasAnObservationPerDrawMatchingTheReport) {
  const std::string backend = planted("offsets_from_seqlens");
  CheckOptions o = options(backend, "draw_log", "metadata/shiftingARowShiftsItsOffsets,metadata/matchesReference");
  o.draw_log = (kDir / "draws.jsonl").string();
  fs::remove(o.draw_log);
  EXPECT_EQ(check(o), 1);
  const json report = report_json("draw_log");
  std::map<std::string, std::map<std::string, int>> statuses;
  std::ifstream in(o.draw_log);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    for (const char* key : {"type", "status", "status_reason", "representation", "arguments", "how_generated",
                            "features", "coverage", "timing", "metadata", "property", "run_start"})
      EXPECT_TRUE(j.contains(key)) << key << " missing from " << line.substr(0, 200);
    EXPECT_EQ(j["type"], "test_case");
    ++statuses[j["property"]][j["status"]];
    if (j["status"] == "failed") {
      EXPECT_FALSE(j["status_reason"].get<std::string>().empty());
    }
    EXPECT_TRUE(j["arguments"]["case"].contains("op")) << line.substr(0, 200);
  }
  ASSERT_EQ(statuses.size(), 2u);
  for (const json& r : report["results"]) {
    const auto& seen = statuses[r["id"].get<std::string>()];
    EXPECT_EQ(seen.count("passed") ? seen.at("passed") : 0, r["draws"]["passed"]) << r["id"];
    EXPECT_EQ(seen.count("failed") ? seen.at("failed") : 0, r["draws"]["failed"]) << r["id"];
    EXPECT_EQ(seen.count("gave_up") ? seen.at("gave_up") : 0, r["draws"]["declined"]) << r["id"];
  }
}

// --require-coverage (coverage_targets.hpp): a property that judged too few draws of a
// class fails the run naming the class, the count and the target; one that met it passes.
TEST(CheckCommand, ACoverageTargetNotMetFailsThePropertyNamingTheClass) {
  CheckOptions o = options("reference", "coverage", "metadata/matchesReference,metadata/rowsAreIndependent");
  o.coverage_file = write_list("coverage.txt",
                               "metadata/matchesReference  mask causal  >= 1000  # more than the run draws\n"
                               "metadata/rowsAreIndependent  layout B>1  >= 1\n"
                               "nosuch/property  mask causal  >= 1\n").string();
  EXPECT_EQ(check(o), 1);
  const json report = report_json("coverage");
  const json* missed = result(report, "reference/metadata/matchesReference");
  ASSERT_NE(missed, nullptr);
  EXPECT_EQ((*missed)["verdict"], "FAILED");
  const std::string note = (*missed)["note"];
  EXPECT_NE(note.find("coverage target not met: mask causal: "), std::string::npos) << note;
  EXPECT_NE(note.find("judged draws, the target is 1000 (" + o.coverage_file + ":1: more than the run draws)"),
            std::string::npos) << note;
  EXPECT_EQ((*result(report, "reference/metadata/rowsAreIndependent"))["verdict"], "passed");
  ASSERT_EQ(report["warnings"].size(), 1u);
  EXPECT_NE(report["warnings"][0].get<std::string>().find("nosuch/property matches no test"), std::string::npos);
  o.coverage_file = write_list("coverage_bad.txt", "metadata/  mask causal  > 3\n").string();
  EXPECT_EQ(check(o), 1);
}

}  // namespace
}  // namespace attn_oracle
