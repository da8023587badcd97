// conformance_gtest.cpp: every property x every registered backend as one
// GoogleTest each, named Conformance/Property.Check/<backend>__<property>.
//
// Linked as an object library (attn_oracle::conformance) so that a vendoring
// project gets these tests by linking it and registering its backends with
// ATTN_ORACLE_REGISTER_BACKEND; the binary's main registers them
// (register_conformance_suites, conformance_defaults.hpp) with the settings it
// resolved, after every static registration has run. Each test:
//  - runs its property in a child process (isolation.hpp) unless
//    ATTN_ORACLE_ISOLATE=0, so that a backend that crashes or hangs (no answer
//    within ATTN_ORACLE_CASE_TIMEOUT seconds, default 120) fails this test with
//    the case it crashed on, and the other tests still run. A backend that
//    isolates itself (an exec: worker) runs in this process instead, one
//    backend object per name for the binary's life, so that one worker serves
//    every test the binary runs;
//  - honours the skip and expected-failure lists named by ATTN_ORACLE_SKIPS and
//    ATTN_ORACLE_XFAILS (test_lists.hpp; attn_oracle_add_conformance sets them):
//    an expected failure that fails passes, one that passes fails (XPASS);
//  - fails with every distinct failure's one-line mismatch, its counterexample
//    file and the replay line (this binary, so it runs as printed);
//  - is skipped, with the reasons, when the backend lacks the capability or
//    declined every draw; declines of whole classes are printed, and so is how
//    many draws it judged (a pass on fewer than a tenth of them is noted);
//  - writes its result to ATTN_ORACLE_RESULTS_DIR (when set) for `report merge`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/harness/conformance_defaults.hpp"
#include "attn_oracle/harness/coverage_targets.hpp"
#include "attn_oracle/harness/isolation.hpp"
#include "attn_oracle/harness/program.hpp"
#include "attn_oracle/harness/report.hpp"
#include "attn_oracle/harness/test_lists.hpp"
#include "attn_oracle/runner/repro.hpp"

namespace attn_oracle::inline conformance {
namespace {

// "<backend>__<property>" with every other character an underscore: a test name.
std::string test_name(const std::string& backend, const std::string& property) {
  std::string name = backend + "__" + property;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

// What every test of a run shares: the binary's settings and its lists, read
// once; a list that cannot be read fails every test.
struct ConformanceRun {
  Settings settings;
  std::optional<TestIdList> skips, xfails;
  std::optional<CoverageTargets> coverage;
  std::string error;
};

std::shared_ptr<const ConformanceRun> conformance_run(const Settings& settings) {
  auto run = std::make_shared<ConformanceRun>();
  run->settings = settings;
  for (auto [path, list] : {std::pair{&settings.skips_file, &run->skips}, {&settings.xfails_file, &run->xfails}})
    if (!path->empty() && run->error.empty()) *list = TestIdList::read(*path, run->error);
  if (!settings.coverage_file.empty() && run->error.empty())
    run->coverage = CoverageTargets::read(settings.coverage_file, run->error);
  return run;
}

// The backend a test runs on. One that isolates itself is kept for the
// binary's life: made per test, it would start a worker per test.
Backend* backend_for(const std::string& name, std::unique_ptr<Backend>& fresh) {
  static std::map<std::string, std::unique_ptr<Backend>> kept;
  if (auto it = kept.find(name); it != kept.end()) return it->second.get();
  fresh = BackendRegistry::instance().make(name);
  if (fresh && fresh->isolates_itself()) return (kept[name] = std::move(fresh)).get();
  return fresh.get();
}

// The worker starts since `before`: each result file counts its own test's,
// so that `report merge` sums them to the run's.
std::optional<WorkerStarts> starts_since(const Backend& backend, const std::optional<WorkerStarts>& before) {
  std::optional<WorkerStarts> now = backend.worker_starts();
  if (now && before) now->total -= before->total, now->restarts -= before->restarts;
  return now;
}

void write_result(const CheckResult& r, const RunSettings& s, const std::string& dir, Backend& backend,
                  const std::optional<WorkerStarts>& before) {
  if (dir.empty()) return;
  CheckReport report;
  report.versions = suite_versions();
  report.seed = s.seed, report.cases = s.cases, report.max_size = s.max_size, report.max_failures = s.max_failures;
  report.profile = std::string(to_string(s.draws.profile));
  report.shards = {to_string(s.shard)};
  report.failures_dir = std::filesystem::absolute(s.failures_dir).string();
  report.store = s.use_store;
  BackendInfo info{backend.name(), backend.version(), {}, "every input", std::nullopt};
  info.worker_starts = starts_since(backend, before);
  for (Capability c : backend.capabilities()) info.capabilities.emplace_back(to_string(c));
  report.backends = {info};
  report.results = {r};
  std::string stem = r.id() + ".shard-" + std::to_string(s.shard.index + 1) + "-of-" + std::to_string(s.shard.count);
  for (char& c : stem)
    if (c == '/') c = '.';
  std::filesystem::create_directories(dir);
  std::ofstream(std::filesystem::path(dir) / (stem + ".json")) << report_json(report);
}

std::string failures_text(const CheckResult& r) {
  std::ostringstream os;
  const PropertyOutcome& o = r.outcome;
  if (r.verdict == Verdict::failed && !r.note.empty()) os << r.note << "\n";  // a coverage target not met
  if (!o.failure_summary.empty()) os << "FAILED: " << o.failure_summary << "\n";
  if (const std::string cost = triage_cost_line(o); !cost.empty()) os << cost << "\n";
  for (const TriageEntry& e : triage_entries(o)) {
    if (!e.heading.empty()) os << e.heading << (e.failure ? "" : ": " + e.example) << "\n";
    if (const PropertyFailure* f = e.failure) {
      for (const std::string& line : failure_lines(*f)) os << line << "\n";
      if (!f->backend_log.empty()) os << "the worker's stderr ended with:\n" << f->backend_log << "\n";
    }
    if (!e.decline.empty()) os << "  " << e.decline << "\n";
  }
  return os.str();
}

// One property on one backend, with the run's settings.
class PropertyCheck : public testing::Test {
 public:
  PropertyCheck(std::string backend, std::string property, std::shared_ptr<const ConformanceRun> run)
      : backend_(std::move(backend)), property_(std::move(property)), run_(std::move(run)) {}
  void TestBody() override;

 private:
  std::string backend_, property_;
  std::shared_ptr<const ConformanceRun> run_;
};

void PropertyCheck::TestBody() {
  std::unique_ptr<Backend> fresh;
  Backend* backend = backend_for(backend_, fresh);
  ASSERT_NE(backend, nullptr);
  const std::optional<WorkerStarts> before = backend->worker_starts();
  const PropertyDef* property = find_property(property_);
  ASSERT_NE(property, nullptr);
  ASSERT_TRUE(run_->error.empty()) << run_->error;
  const std::optional<TestIdList> &skips = run_->skips, &xfails = run_->xfails;
  RunSettings settings = run_->settings.run;
  settings.program = this_program();
  const std::string& results = run_->settings.results_dir;
  if (skips && skips->match(backend->name(), backend->version(), property->id, run_arch(*backend, run_->settings.arch))) {
    write_result(listed_skip(property->id, *backend, *skips, run_arch(*backend, run_->settings.arch)), settings, results, *backend, before);
    GTEST_SKIP() << listed_skip(property->id, *backend, *skips, run_arch(*backend, run_->settings.arch)).note;
  }
  const IsolationSettings isolation{settings.program, run_->settings.case_timeout_seconds};
  const PropertyOutcome o = !run_->settings.isolate || backend->isolates_itself()
                                ? run_property(*property, *backend, settings)
                                : run_property_isolated(*property, *backend, settings, isolation);
  CheckResult r = verdict_of(o, xfails ? &*xfails : nullptr, run_arch(*backend, run_->settings.arch));
  // A shard's counts are a share of the run's: the targets are a whole run's.
  if (run_->coverage && settings.shard.count == 1) run_->coverage->apply(r);
  write_result(r, settings, results, *backend, before);
  if (const auto starts = backend->worker_starts()) std::cout << "[ worker   ] " << worker_starts_line(*starts) << " in this process\n";
  RecordProperty("draws", o.drawn);
  RecordProperty("declined", o.declined);
  for (const std::string& line : store_lines(o.store)) std::cout << "[ store    ] " << line << "\n";
  RecordProperty("judged", o.judged());
  std::cout << "[ judged   ] " << o.judged() << " of " << o.drawn << " draws\n";
  if (const std::string thin = verdict_text(r); r.verdict == Verdict::passed && thin != "passed")
    std::cout << "[ note     ] " << thin << "\n";
  for (const std::string& line : wholly_declined_classes(o)) std::cout << "[ note     ] " << line << "\n";
  if (!o.not_compared.empty() && r.verdict != Verdict::skipped) std::cout << "[ note     ] " << not_compared_line(o) << "\n";
  switch (r.verdict) {
    case Verdict::passed: return;
    case Verdict::xfail: std::cout << "[ xfail    ] " << r.note << "\n" << failures_text(r); return;
    case Verdict::skipped: GTEST_SKIP() << o.message;
    case Verdict::xpass: FAIL() << "XPASS: " << r.note;
    case Verdict::failed: FAIL() << failures_text(r);
  }
}

// Every property x every registered backend, named as a parameterized test
// would be (Conformance/Property.Check/<backend>__<property>).
void register_property_checks(const Settings& settings) {
  const std::shared_ptr<const ConformanceRun> run = conformance_run(settings);
  for (const std::string& backend : BackendRegistry::instance().names())
    for (const PropertyDef& p : all_properties())
      testing::RegisterTest("Conformance/Property", ("Check/" + test_name(backend, p.id)).c_str(), nullptr,
                            (p.id + " on " + backend).c_str(), __FILE__, __LINE__,
                            [=]() -> PropertyCheck* { return new PropertyCheck(backend, p.id, run); });
}

const bool kRegistered = add_conformance_suite(register_property_checks);

}  // namespace
}  // namespace attn_oracle::conformance
