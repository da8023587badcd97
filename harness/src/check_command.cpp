// check_command.cpp: `check` (check.hpp). Prints what runs (backends and their
// versions, seed, draws, shards, the environment variables read), a live
// progress line per property and backend on stderr, every distinct failure with
// its counterexample, then the table; writes report/conformance.{md,json}.
// Ctrl-C stops after the property that is running and still writes the report,
// marked interrupted. Tested by tests/check_command_test.cpp.
#include "attn_oracle/harness/check.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/harness/ci_output.hpp"
#include "attn_oracle/harness/coverage_targets.hpp"
#include "attn_oracle/harness/devices.hpp"
#include "attn_oracle/harness/isolation.hpp"
#include "attn_oracle/harness/report.hpp"
#include "attn_oracle/harness/test_lists.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/runner/repro.hpp"

namespace attn_oracle::inline harness {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t interrupted = 0;

// The first Ctrl-C asks to stop after the running property; a second one kills.
extern "C" void on_sigint(int) {
  interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<std::unique_ptr<Backend>> chosen_backends(const std::string& which) {
  std::vector<std::unique_ptr<Backend>> out;
  for (const std::string& name : BackendRegistry::instance().names())
    if (which == "all" || which == name) out.push_back(BackendRegistry::instance().make(name));
  if (out.empty() && which.starts_with(kProcessBackendPrefix)) out.push_back(BackendRegistry::instance().make(which));
  return out;
}


// "draws done / total, elapsed" for one property on one backend: rewritten in
// place on a terminal, a plain line every few seconds otherwise (CI logs).
class ProgressLine {
 public:
  explicit ProgressLine(std::string what) : what_(std::move(what)), tty_(isatty(fileno(stderr))) {}
  ~ProgressLine() { clear(); }
  void clear() {
    if (tty_ && drawn_) std::cerr << "\r\033[K" << std::flush;
    drawn_ = false;
  }
  void update(int done, int total) {
    const double s = seconds_since(start_);
    if (s - last_ < (tty_ ? 0.1 : 10.0)) return;
    last_ = s;
    drawn_ = true;
    std::cerr << (tty_ ? "\r\033[K  " : "  ... ") << what_ << ": " << done << "/" << total << " draws, " << std::fixed
              << std::setprecision(1) << s << " s" << (tty_ ? "" : "\n") << std::flush;
  }

 private:
  std::string what_;
  bool tty_, drawn_ = false;
  Clock::time_point start_ = Clock::now();
  double last_ = 0.0;
};

void print_header(const CheckReport& r, const RunSettings& settings, const CheckEnvironment& env) {
  std::cout << "attn-oracle " << ATTN_ORACLE_VERSION << " check: seed " << r.seed << ", " << r.cases
            << " draws per property, max_size " << r.max_size << ", shard";
  for (const std::string& s : r.shards) std::cout << " " << s;
  std::cout << "\n";
  for (const BackendInfo& b : r.backends) {
    std::cout << "  backend " << b.name << " (" << b.version << "):";
    for (const std::string& c : b.capabilities) std::cout << " " << c;
    std::cout << "\n";
    if (b.domain != "every input") std::cout << "    domain: " << b.domain << "\n";
  }
  if (!env.backends_note.empty()) std::cout << "  " << env.backends_note << "\n";
  for (const auto& [k, v] : r.versions) std::cout << "  " << k << ": " << v << "\n";
  std::cout << "  env: RC_PARAMS=" << env.settings.rc_params << " ATTN_ORACLE_FAILURES_DIR=" << r.failures_dir
            << " ATTN_ORACLE_STORE=" << env.settings.store.value_or("") << "\n";
  // Read by the CUDA runtime, not by the suite: which devices this run's backends see (devices.hpp).
  if (env.settings.visible_devices) std::cout << "  CUDA_VISIBLE_DEVICES=" << *env.settings.visible_devices << "\n";
  std::cout << "  failure store: " << (r.store ? "on, " + r.failures_dir + " (its saved failures run first)" : "off")
            << "\n";
  if (settings.draws.shape_stable) std::cout << "  shape-stable draws: " << shape_stable_note() << "\n";
  std::cout << "\n";
}

void print_table(const CheckReport& report) {
  size_t width = 8;
  for (const CheckResult& r : report.results) width = std::max(width, r.outcome.property.size());
  std::cout << "\n" << std::left << std::setw(width + 2) << "property";
  for (const BackendInfo& b : report.backends) std::cout << std::setw(22) << b.name;
  std::cout << "\n" << std::setw(width + 2) << "" << "(verdict, draws passed, worst error / budget)\n";
  std::vector<std::string> rows;
  for (const CheckResult& r : report.results)
    if (std::find(rows.begin(), rows.end(), r.outcome.property) == rows.end()) rows.push_back(r.outcome.property);
  for (const std::string& property : rows) {
    std::cout << std::setw(width + 2) << property;
    for (const BackendInfo& b : report.backends) {
      std::string cell = "not run";
      for (const CheckResult& r : report.results)
        if (r.outcome.property == property && r.outcome.backend == b.name) cell = table_cell(r);
      std::cout << std::setw(22) << cell;
    }
    std::cout << "\n";
  }
}

// The end of a worker's stderr, indented (the report keeps all of what was captured).
void print_backend_log(const std::string& log) {
  if (log.empty()) return;
  std::cout << "    the worker's stderr ended with:\n";
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) std::cout << "      | " << line << "\n";
}

void print_result(const CheckResult& r) {
  const PropertyOutcome& o = r.outcome;
  const std::string verdict = verdict_text(r);
  std::cout << "  " << std::left << std::setw(9) << verdict << (verdict.size() < 9 ? "" : " ") << o.property << " on "
            << o.backend;
  if (o.drawn > 0)
    std::cout << " (" << o.passed << " passed, " << o.declined << " declined, " << o.failed << " failed of " << o.drawn
              << " draws: " << o.judged() << " judged, worst error/budget " << format_ratio(o.worst_ratio) << ", " << std::fixed
              << std::setprecision(1) << o.seconds << " s)";
  std::cout << "\n";
  if (!r.note.empty()) std::cout << "    " << r.note << "\n";
  if (!o.not_compared.empty() && r.verdict != Verdict::skipped) std::cout << "    note: " << not_compared_line(o) << "\n";
  if (!o.message.empty() && r.verdict != Verdict::passed) std::cout << "    " << o.message << "\n";
  for (const std::string& line : wholly_declined_classes(o)) std::cout << "    note: " << line << "\n";
  if (!o.failure_summary.empty()) std::cout << "    FAILED: " << o.failure_summary << "\n";
  for (const std::string& line : store_lines(o.store)) std::cout << "    store: " << line << "\n";
  for (const TriageEntry& e : triage_entries(o)) {
    if (!e.heading.empty()) std::cout << "    " << e.heading << (e.failure ? "" : ": " + e.example) << "\n";
    if (const PropertyFailure* f = e.failure) {
      for (const std::string& line : failure_lines(*f)) std::cout << "    " << line << "\n";
      print_backend_log(f->backend_log);
    }
    if (!e.decline.empty()) std::cout << "      " << e.decline << "\n";
  }
  if (const std::string cost = triage_cost_line(o); !cost.empty()) std::cout << "    " << cost << "\n";
}

struct Lists {
  std::optional<TestIdList> skips, xfails;
  std::optional<CoverageTargets> coverage;
};

// Reads the list files; warns (report and stderr) about entries no test of this
// run matches. False after printing why a file is unreadable.
bool read_lists(const CheckOptions& options, const std::vector<std::unique_ptr<Backend>>& backends,
                const std::vector<const PropertyDef*>& properties, Lists& lists, CheckReport& report) {
  std::vector<std::pair<std::string, std::string>> ids;
  for (const auto& b : backends)
    for (const PropertyDef* p : properties) ids.emplace_back(b->name(), p->id);
  if (!options.coverage_file.empty()) {
    std::string error;
    lists.coverage = CoverageTargets::read(options.coverage_file, error);
    if (!lists.coverage) return std::cerr << "attn-oracle check: " << error << "\n", false;
  }
  for (auto [file, list] : {std::pair{&options.skips_file, &lists.skips}, {&options.xfails_file, &lists.xfails}}) {
    if (file->empty()) continue;
    std::string error;
    *list = TestIdList::read(*file, error);
    if (!*list) return std::cerr << "attn-oracle check: " << error << "\n", false;
    for (std::string& w : (*list)->unmatched_warnings(ids)) report.warnings.push_back(std::move(w));
  }
  for (const std::string& w : report.warnings) std::cerr << "attn-oracle check: warning: " << w << "\n";
  return true;
}

CheckResult run_one(const PropertyDef& property, Backend& backend, const RunSettings& settings, const Lists& lists,
                    const CheckOptions& options, const CheckEnvironment& env) {
  if (lists.skips && lists.skips->match(backend.name(), backend.version(), property.id, run_arch(backend, env.settings.arch))) {
    const CheckResult r = listed_skip(property.id, backend, *lists.skips, run_arch(backend, env.settings.arch));
    print_result(r);
    return r;
  }
  ProgressLine line(property.id + " on " + backend.name());
  struct ToLine : RunListener {
    explicit ToLine(ProgressLine& l) : line(l) {}
    void progress(int done, int total) override { line.update(done, total); }
    ProgressLine& line;
  } progress(line);
  // A backend that isolates itself (a worker process) runs here, so that its
  // one worker serves every property of the run; a child process per property
  // would start a worker per property.
  PropertyOutcome o = options.isolate && !backend.isolates_itself()
                          ? run_property_isolated(property, backend, settings, IsolationSettings{env.program, options.case_timeout_seconds}, &progress)
                          : run_property(property, backend, settings, &progress);
  line.clear();
  CheckResult r = verdict_of(std::move(o), lists.xfails ? &*lists.xfails : nullptr, run_arch(backend, env.settings.arch));
  if (lists.coverage) lists.coverage->apply(r);
  print_result(r);
  return r;
}

// The program's settings (RC_PARAMS, a conformance binary's shard, ...) first,
// then --deep (10x the draws), then --cases, --seed, --shard and the rest.
RunSettings check_settings(const CheckOptions& options, const CheckEnvironment& env) {
  RunSettings s = env.settings.run;
  if (options.deep) s.cases *= 10;
  if (options.cases) s.cases = *options.cases;
  if (options.seed) s.seed = *options.seed;
  if (options.random_seed) s.seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  if (options.shard) s.shard = *options.shard;
  if (options.profile) s.draws.profile = *options.profile;
  if (options.shape_stable) s.draws.shape_stable = true;
  s.max_failures = options.max_failures;
  if (!options.draw_log.empty()) s.draw_log = std::filesystem::absolute(options.draw_log).string();
  s.program = env.program;
  if (!env.settings.store) s.use_store = true;  // `check` keeps its failures unless ATTN_ORACLE_STORE says otherwise
  if (options.store_dir) s.failures_dir = *options.store_dir, s.use_store = true;
  if (options.no_store) s.use_store = false;
  return s;
}

// Everything the report says before any property has run.
CheckReport start_report(const CheckOptions& options, const RunSettings& settings, const CheckEnvironment& env,
                         const std::vector<std::unique_ptr<Backend>>& backends) {
  CheckReport report;
  report.versions = suite_versions();
  report.versions.insert(report.versions.end(), env.versions.begin(), env.versions.end());
  report.seed = settings.seed;
  report.cases = settings.cases;
  report.max_size = settings.max_size;
  report.profile = std::string(to_string(settings.draws.profile)) + (settings.draws.shape_stable ? ", shape-stable draws" : "");
  report.max_failures = settings.max_failures;
  report.shards = {to_string(settings.shard)};
  report.filter = options.filter;
  report.skips_file = options.skips_file;
  report.xfails_file = options.xfails_file;
  report.failures_dir = std::filesystem::absolute(settings.failures_dir).string();
  report.store = settings.use_store;
  for (const auto& b : backends) {
    if (settings.use_store)
      for (std::string& note : orphaned_store_notes(settings.failures_dir, b->identity())) report.warnings.push_back(std::move(note));
    BackendInfo info{b->name(), b->version(), {}, to_string(b->domain()), std::nullopt};
    for (Capability c : b->capabilities()) info.capabilities.emplace_back(to_string(c));
    report.backends.push_back(std::move(info));
  }
  return report;
}

// The properties whose id starts with one of the filter's comma-separated
// prefixes, in registry order (a tool that runs a selection of properties, the
// pytest plugin, names them all in one run).
std::vector<const PropertyDef*> filtered(const std::string& filter) {
  std::vector<std::string> prefixes;
  std::istringstream parts(filter);
  for (std::string prefix; std::getline(parts, prefix, ',');) prefixes.push_back(prefix);
  if (prefixes.empty()) prefixes.push_back("");
  std::vector<const PropertyDef*> out;
  for (const PropertyDef& p : all_properties())
    if (std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& x) { return p.id.rfind(x, 0) == 0; }))
      out.push_back(&p);
  return out;
}

// The worker starts of each backend that has a worker, into the report, and
// one line each: a worker per run is the norm, restarts follow its failures.
void note_worker_starts(CheckReport& report, const std::vector<std::unique_ptr<Backend>>& backends) {
  for (size_t i = 0; i < backends.size(); ++i) {
    const std::optional<WorkerStarts> starts = backends[i]->worker_starts();
    if (!starts) continue;
    report.backends[i].worker_starts = starts;
    std::cout << worker_starts_line(*starts) << " (" << backends[i]->name() << ")\n";
  }
}

}  // namespace

int run_check_command(const CheckOptions& options, const CheckEnvironment& env) {
  if (!options.devices.empty() && !options.list && !options.describe) return run_check_on_devices(options, env);
  const RunSettings settings = check_settings(options, env);
  const auto backends = chosen_backends(options.backend);
  if (backends.empty()) {
    std::cerr << "attn-oracle check: unknown backend '" << options.backend << "'\n";
    return 1;
  }
  const std::vector<const PropertyDef*> properties = filtered(options.filter);
  if (properties.empty()) {
    std::cerr << "attn-oracle check: --filter '" << options.filter << "' matches no property; the properties are:\n";
    for (const PropertyDef& p : all_properties()) std::cerr << "  " << p.id << "\n";
    return 1;
  }
  if (options.list) {  // one id a line, for tools that make a test of each (the pytest plugin)
    for (const PropertyDef* p : properties) std::cout << p->id << "\n";
    return 0;
  }
  if (options.describe) {  // for a person: what each property checks, one line each
    for (const PropertyDef* p : properties) std::cout << p->id << "\n    " << p->summary << "\n";
    return 0;
  }
  CheckReport report = start_report(options, settings, env, backends);
  Lists lists;
  if (!read_lists(options, backends, properties, lists, report)) return 1;
  print_header(report, settings, env);

  interrupted = 0;
  const auto previous_handler = std::signal(SIGINT, on_sigint);
  for (const PropertyDef* property : properties)
    for (const auto& backend : backends)
      if (!interrupted) report.results.push_back(run_one(*property, *backend, settings, lists, options, env));
  std::signal(SIGINT, previous_handler);
  report.interrupted = interrupted != 0;
  if (lists.coverage)
    for (std::string& w : lists.coverage->unmatched_warnings(report.results)) {
      std::cerr << "attn-oracle check: warning: " << w << "\n";
      report.warnings.push_back(std::move(w));
    }

  print_table(report);
  for (const DrawCost& c : draw_costs(report)) std::cout << draw_cost_line(c) << "\n";
  std::cout << "\n" << report.count(Verdict::passed) << " passed, " << report.count(Verdict::failed) << " failed, "
            << report.count(Verdict::skipped) << " skipped, " << report.count(Verdict::xfail) << " expected failures, "
            << report.count(Verdict::xpass) << " unexpected passes" << (report.interrupted ? " (interrupted)" : "")
            << "\n";
  note_worker_starts(report, backends);
  std::string error;
  if (!options.report_dir.empty()) {
    if (!write_report_files(report, options.report_dir, error)) std::cerr << "attn-oracle check: " << error << "\n";
    else std::cout << "report: " << options.report_dir << "/conformance.md, " << options.report_dir << "/conformance.json\n";
  }
  write_ci_output(report, options, error);
  if (report.interrupted) return 130;
  return report.failures() == 0 && error.empty() ? 0 : 1;
}

}  // namespace attn_oracle::harness
