// failure_store_test.cpp: the failure store (failure_store.hpp) through
// `check`, in process, on a backend whose name and version stay the same
// while its planted bug is switched on and off (as a fix would): a failure is
// replayed first by the next run whatever its seed and budget, said as such,
// passes after the fix and is retired after three passing runs; the same case
// from two seeds is one file, different cases are different files;
// --no-store replays and keeps nothing, --store DIR keeps there; a corrupt
// stored file and a stored property this build lacks are reported, not fatal.
// Every test uses its own fresh directory, so a second ctest run gives the
// same results.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/runner/failure_store.hpp"
#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kProperty = "metadata/matchesReference";

// The reference's metadata, or with `bug` the planted no_trimming bug's:
// one backend before and after its fix.
class ToggledBackend final : public Backend, MetadataCapability {
 public:
  static inline bool bug = true;
  std::string name() const override { return "toggled"; }
  std::string version() const override { return "1"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    return (bug ? planted_ : reference_)->metadata()->metadata(batch);
  }

 private:
  std::unique_ptr<Backend> reference_ = make_reference_backend();
  std::unique_ptr<Backend> planted_ = [] {
    for (planted::PlantedBug& b : planted::metadata_bugs())
      if (b.name == "no_trimming") return b.make();
    return std::unique_ptr<Backend>();
  }();
};

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_failure_store_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct CheckRun {
  int status = 0;
  std::string out;
  json result;  // this property's result in the report
};

// `check --backend toggled --filter metadata/matchesReference` with the
// store in `dir` (unless `store` is false: --no-store, counterexamples in dir).
CheckRun check(const fs::path& dir, uint64_t seed, int cases, bool store = true) {
  // Registered here, not at static initialisation: the fixture replays in the same
  // executable instantiate over the backends registered then.
  static const bool registered =
      BackendRegistry::instance().add("toggled", [] { return std::make_unique<ToggledBackend>(); });
  (void)registered;
  CheckOptions o;
  o.backend = "toggled";
  o.filter = kProperty;
  o.seed = seed;
  o.cases = cases;
  o.max_failures = 1;  // one case a run: the counts below stay exact
  o.isolate = false;  // this test binary does not speak the child verbs
  o.report_dir = (dir / "report").string();
  if (store) o.store_dir = (dir / "store").string();
  else o.no_store = true;
  // The failures directory, as a program's edge resolves it (ATTN_ORACLE_FAILURES_DIR).
  CheckEnvironment env;
  env.settings.run.failures_dir = (dir / "store").string();
  CheckRun r;
  testing::internal::CaptureStdout();
  r.status = run_check_command(o, env);
  r.out = testing::internal::GetCapturedStdout();
  std::ifstream in(dir / "report" / "conformance.json");
  const json report = json::parse(in);
  for (const json& x : report["results"])
    if (x["property"] == kProperty) r.result = x;
  return r;
}

fs::path property_dir(const fs::path& dir) { return property_store_dir((dir / "store").string(), {"toggled", "1"}, kProperty); }

std::vector<fs::path> case_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(property_dir(dir), ec))
    if (e.path().string().ends_with(".case.json")) out.push_back(e.path());
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FailureStore, AStoredFailureIsReplayedFirstThenPassesAndIsRetired) {
  const fs::path dir = fresh_dir("lifecycle");
  ToggledBackend::bug = true;
  const CheckRun found = check(dir, 7, 100);
  ASSERT_EQ(found.status, 1) << found.out;
  ASSERT_EQ(case_files(dir).size(), 1u) << found.out;
  EXPECT_FALSE(has(found.out, "replayed")) << found.out;

  // Another seed, one draw: the stored case still fails, and says where it came from.
  const CheckRun again = check(dir, 8, 1);
  EXPECT_EQ(again.status, 1) << again.out;
  EXPECT_TRUE(has(again.out, "store: 1 saved failure replayed: 1 still fails")) << again.out;
  EXPECT_TRUE(has(again.out, "counterexample (from the store): " + fs::absolute(case_files(dir)[0]).string())) << again.out;
  EXPECT_EQ(again.result["store"]["still_failing"], 1) << again.result.dump();
  EXPECT_EQ(again.result["failures"][0]["from_store"], true);
  std::ifstream md(dir / "report" / "conformance.md");
  EXPECT_TRUE(has(std::string(std::istreambuf_iterator<char>(md), {}), "- store: 1 saved failure replayed: 1 still fails"));

  // Fixed: it passes, is kept for two more passing runs, then retired.
  ToggledBackend::bug = false;
  for (int run = 1; run <= kRetirePassingRuns; ++run) {
    const CheckRun fixed = check(dir, 9 + run, 1);
    EXPECT_EQ(fixed.status, 0) << fixed.out;
    EXPECT_TRUE(has(fixed.out, "store: 1 saved failure replayed: 1 now passes")) << fixed.out;
    EXPECT_EQ(has(fixed.out, "retired"), run == kRetirePassingRuns) << fixed.out;
    EXPECT_EQ(case_files(dir).size(), run == kRetirePassingRuns ? 0u : 1u) << run;
  }
  const CheckRun after = check(dir, 20, 1);
  EXPECT_FALSE(has(after.out, "replayed")) << after.out;
  EXPECT_FALSE(after.result.contains("store")) << after.result.dump();
}

// A shown failure prints its case in a line (the JSON stays in its file) and its repro
// line; a cluster the store opened reads "from the store", with the draws of this run
// that join it counted from the first of them, never "from draw -1".
TEST(FailureStore, AStoredClusterSaysFromTheStoreAndCountsFromItsFirstDraw) {
  const fs::path dir = fresh_dir("store_heading");
  ToggledBackend::bug = true;
  const CheckRun found = check(dir, 7, 100);
  ASSERT_EQ(found.status, 1) << found.out;
  EXPECT_FALSE(has(found.out, "\"schema\"")) << found.out;
  EXPECT_TRUE(has(found.out, "      metadata ")) << found.out;
  EXPECT_TRUE(has(found.out, "    repro: ") && has(found.out, " repro --backend toggled ")) << found.out;
  const CheckRun stored_only = check(dir, 8, 1);
  EXPECT_TRUE(has(stored_only.out, "from the store")) << stored_only.out;
  EXPECT_FALSE(has(stored_only.out, "from draw -1")) << stored_only.out;
  const CheckRun joined = check(dir, 7, 100);
  EXPECT_FALSE(has(joined.out, "from draw -1")) << joined.out;
  EXPECT_TRUE(has(joined.out, ", and from the store\n")) << joined.out;
}

// Seeds 7 and 9 shrink to the same case, seed 15 to another (found by trying seeds).
TEST(FailureStore, TheSameCaseFromTwoSeedsIsOneFileAndAnotherCaseIsAnother) {
  const fs::path dir = fresh_dir("two_seeds");
  ToggledBackend::bug = true;
  const CheckRun a = check(dir, 7, 100, /*store=*/false);
  const CheckRun b = check(dir, 9, 100, /*store=*/false);
  ASSERT_EQ(a.status, 1);
  ASSERT_EQ(b.status, 1);
  const std::string first = a.result["failures"][0]["counterexample"];
  EXPECT_EQ(first, b.result["failures"][0]["counterexample"]) << a.out << b.out;
  EXPECT_EQ(case_files(dir).size(), 1u);
  const CheckRun c = check(dir, 15, 100, /*store=*/false);
  ASSERT_EQ(c.status, 1);
  EXPECT_NE(first, c.result["failures"][0]["counterexample"]) << c.out;
  EXPECT_EQ(case_files(dir).size(), 2u);
  EXPECT_EQ(read_case_file(first).value().property->seed, 9u);  // the last run that found it
}

TEST(FailureStore, DifferentCasesAreDifferentFilesAndTheNoteDoesNotCount) {
  const fs::path dir = fresh_dir("hashes");
  Case one = read_case_file(ATTN_ORACLE_FIXTURES_DIR "/design/ex1.case.json").value();
  one.property = PropertyRecord{kProperty, "toggled", "1", 7, json::object()};
  Case two = read_case_file(ATTN_ORACLE_FIXTURES_DIR "/design/ex2.case.json").value();
  two.property = one.property;
  Case one_again = one;
  one_again.note = "found from another seed";
  one_again.property = PropertyRecord{kProperty, "exec:./other", "2", 99, json::object()};
  Case one_drawn = one;
  one_drawn.property = PropertyRecord{kProperty, "toggled", "1", 7, json{{"side", "q"}}};
  EXPECT_EQ(case_hash(one), case_hash(one_again));
  EXPECT_NE(case_hash(one), case_hash(two));
  EXPECT_NE(case_hash(one), case_hash(one_drawn));  // a drawn value is part of the case
  RunSettings s;
  s.failures_dir = (dir / "store").string();
  const std::string a = keep_counterexample(one, {"toggled", "1"}, kProperty, s);
  const std::string b = keep_counterexample(two, {"toggled", "1"}, kProperty, s);
  EXPECT_NE(a, b);
  EXPECT_EQ(keep_counterexample(one_again, {"toggled", "1"}, kProperty, s), a);
  EXPECT_EQ(case_files(dir).size(), 2u);
  EXPECT_EQ(read_case_file(b).value().note, two.note);
}

TEST(FailureStore, NoStoreReplaysNothingAndKeepsNothing) {
  const fs::path dir = fresh_dir("no_store");
  ToggledBackend::bug = true;
  ASSERT_EQ(check(dir, 7, 100).status, 1);
  const CheckRun off = check(dir, 8, 1, /*store=*/false);
  EXPECT_FALSE(has(off.out, "replayed")) << off.out;
  EXPECT_TRUE(has(off.out, "failure store: off")) << off.out;
  // A failure found with the store off is written, but the next run does not replay it.
  const fs::path other = fresh_dir("no_store_kept");
  ASSERT_EQ(check(other, 7, 100, /*store=*/false).status, 1);
  EXPECT_EQ(case_files(other).size(), 1u);
  const CheckRun next = check(other, 8, 1);
  EXPECT_FALSE(has(next.out, "replayed")) << next.out;
}

TEST(FailureStore, StoreDirKeepsTheFailuresThere) {
  const fs::path dir = fresh_dir("store_dir");
  ToggledBackend::bug = true;
  const CheckRun r = check(dir, 7, 100);
  ASSERT_EQ(r.status, 1);
  const std::string path = r.result["failures"][0]["counterexample"];
  EXPECT_EQ(fs::path(path).parent_path(), fs::absolute(property_dir(dir)));
  EXPECT_TRUE(fs::exists(property_dir(dir) / "store.json"));
  EXPECT_TRUE(has(r.out, "failure store: on, " + fs::absolute(dir / "store").string())) << r.out;
  // What `replay` and `promote` read: a case file with its property record.
  const Expected<Case> c = read_case_file(path);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->property);
  EXPECT_EQ(c->property->id, kProperty);
  EXPECT_EQ(c->property->backend, "toggled");
}

TEST(FailureStore, ACorruptStoredFileIsReportedNotFatal) {
  const fs::path dir = fresh_dir("corrupt");
  ToggledBackend::bug = true;
  ASSERT_EQ(check(dir, 7, 100).status, 1);
  std::ofstream(case_files(dir).at(0)) << "{\"schema\": \"attn-oracle.case/2\", \"op\": ";
  ToggledBackend::bug = false;
  const CheckRun r = check(dir, 8, 5);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "store: 1 saved failure skipped: unreadable")) << r.out;
  EXPECT_TRUE(has(r.out, "cannot read the stored case")) << r.out;
  EXPECT_EQ(r.result["store"]["unreadable"], 1);
}

TEST(FailureStore, AStoredPropertyThisBuildLacksIsAWarning) {
  const fs::path dir = fresh_dir("orphan");
  RunSettings s;
  s.failures_dir = (dir / "store").string();
  s.use_store = true;
  keep_counterexample(read_case_file(ATTN_ORACLE_FIXTURES_DIR "/design/ex1.case.json").value(), {"toggled", "1"},
                      "metadata/noLongerAProperty", s);
  ToggledBackend::bug = false;
  const CheckRun r = check(dir, 7, 2);
  EXPECT_EQ(r.status, 0) << r.out;
  std::ifstream in(dir / "report" / "conformance.json");
  const json report = json::parse(in);
  const json& warnings = report["warnings"];
  ASSERT_EQ(warnings.size(), 1u) << warnings.dump();
  EXPECT_TRUE(has(warnings[0], "metadata/noLongerAProperty, a property this build does not have")) << warnings.dump();
}

}  // namespace
}  // namespace attn_oracle
