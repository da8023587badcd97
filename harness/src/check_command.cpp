// check_command.cpp: `attn-oracle check`. Prints what runs (backends, seed,
// RapidCheck parameters, environment), a live progress line per property and
// backend on stderr, then the table property x backend -> verdict, cases run and
// worst error / budget, and the replay line of every failure; writes
// report/conformance.{md,json} (check_report.hpp). Ctrl-C stops after the
// property that is running and still writes the report, marked interrupted.
#include "check.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include "attn_oracle/property_runner.hpp"
#include "check_report.hpp"
#include "test_id_list.hpp"
#include "builtin_backends.hpp"

#ifndef ATTN_ORACLE_CUDA_VERSION
#define ATTN_ORACLE_CUDA_VERSION "none"
#endif
#ifndef ATTN_ORACLE_CUDNN_VERSION
#define ATTN_ORACLE_CUDNN_VERSION "none"
#endif

namespace attn_oracle {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t interrupted = 0;

// The first Ctrl-C asks to stop after the running property; a second one kills.
extern "C" void on_sigint(int) {
  interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::unique_ptr<Backend>> chosen_backends(const std::string& which) {
  std::vector<std::unique_ptr<Backend>> out;
  for (const std::string& name : BackendRegistry::instance().names())
    if (which == "all" || which == name) out.push_back(BackendRegistry::instance().make(name));
  return out;
}

std::string compiler_version() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}

std::vector<std::pair<std::string, std::string>> versions() {
  const std::string device = production_device();
  return {{"attn-oracle", ATTN_ORACLE_VERSION}, {"compiler", compiler_version()},
          {"CUDA", ATTN_ORACLE_CUDA_VERSION},   {"cuDNN", ATTN_ORACLE_CUDNN_VERSION},
          {"device", device}};
}

// "cases done / total, elapsed" for one property on one backend: rewritten in
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
    std::cerr << (tty_ ? "\r\033[K  " : "  ... ") << what_ << ": " << done << "/" << total << " cases, "
              << std::fixed << std::setprecision(1) << s << " s" << (tty_ ? "" : "\n") << std::flush;
  }
  double elapsed() const { return seconds_since(start_); }

 private:
  std::string what_;
  bool tty_, drawn_ = false;
  Clock::time_point start_ = Clock::now();
  double last_ = 0.0;
};

void print_header(const CheckReport& r) {
  std::cout << "attn-oracle " << ATTN_ORACLE_VERSION << " check: seed " << r.seed << ", " << r.max_success
            << " cases per property, max_size " << r.max_size << (r.deep ? " (deep)" : "") << "\n";
  for (const BackendInfo& b : r.backends) {
    std::cout << "  backend " << b.name << " (" << b.version << "):";
    for (const std::string& c : b.capabilities) std::cout << " " << c;
    std::cout << "\n";
  }
  if (!builtin_backends_note().empty()) std::cout << "  " << builtin_backends_note() << "\n";
  for (const auto& [k, v] : r.versions) std::cout << "  " << k << ": " << v << "\n";
  std::cout << "  env: RC_PARAMS=" << r.rc_params << " ATTN_ORACLE_FAILURES_DIR=" << r.failures_dir << "\n\n";
}

void print_table(const CheckReport& report) {
  size_t width = 8;
  for (const CheckResult& r : report.results) width = std::max(width, r.property.size());
  std::cout << "\n" << std::left << std::setw(width + 2) << "property";
  for (const BackendInfo& b : report.backends) std::cout << std::setw(22) << b.name;
  std::cout << "\n" << std::setw(width + 2) << "" << "(verdict, cases run, worst error / budget)\n";
  for (size_t i = 0; i < report.results.size(); i += report.backends.size()) {
    std::cout << std::setw(width + 2) << report.results[i].property;
    for (size_t k = 0; k < report.backends.size() && i + k < report.results.size(); ++k)
      std::cout << std::setw(22) << table_cell(report.results[i + k]);
    std::cout << "\n";
  }
}

void print_result(const CheckResult& r, double seconds) {
  std::cout << "  " << std::left << std::setw(9) << to_string(r.verdict) << r.property << " on " << r.backend;
  if (r.verdict != Verdict::skipped)
    std::cout << " (" << r.cases << " cases, worst error/budget " << format_ratio(r.worst_ratio) << ", "
              << std::fixed << std::setprecision(1) << seconds << " s)";
  std::cout << "\n";
  if (r.verdict == Verdict::skipped || r.verdict == Verdict::passed) return;
  std::istringstream lines(r.message);
  for (std::string line; std::getline(lines, line);) std::cout << "    " << line << "\n";
  if (!r.counterexample.empty()) std::cout << "    counterexample: " << r.counterexample << "\n    replay: " << r.replay << "\n";
  if (!r.rerun.empty()) std::cout << "    rerun: " << r.rerun << "\n";
}

CheckResult to_result(const PropertyOutcome& o) {
  CheckResult r;
  r.property = o.property;
  r.backend = o.backend;
  r.cases = o.cases;
  r.worst_ratio = o.worst_ratio;
  r.message = o.message;
  r.counterexample = o.case_path;
  r.replay = o.replay_command;
  r.rerun = o.rerun_command;
  switch (o.status) {
    case PropertyOutcome::Status::passed: r.verdict = Verdict::passed; break;
    case PropertyOutcome::Status::failed: r.verdict = Verdict::failed; break;
    case PropertyOutcome::Status::skipped: r.verdict = Verdict::skipped; break;
    case PropertyOutcome::Status::gave_up: r.verdict = Verdict::gave_up; break;
  }
  return r;
}

// A listed expected failure that fails is xfail; one that passes is XPASS, which
// is reported but does not fail the run (a random search may simply miss a bug).
void apply_xfail(CheckResult& r, const TestIdList::Entry& entry, const std::string& file) {
  const std::string where = file + ":" + std::to_string(entry.line);
  if (unexpected_failure(r.verdict)) {
    r.verdict = Verdict::xfail;
    r.message = "expected failure (" + where + ")\n" + r.message;
  } else if (r.verdict == Verdict::passed) {
    r.verdict = Verdict::xpass;
    r.message = "listed as an expected failure (" + where + ") but passed; remove it from the list if the bug is fixed";
  }
}

struct Lists {
  std::optional<TestIdList> skips, xfails;
};

// Reads the list files; warns (report and stderr) about entries no test id of
// this run's registry matches. False after printing why a file is unreadable.
bool read_lists(const CheckOptions& options, const std::vector<std::unique_ptr<Backend>>& backends,
                Lists& lists, CheckReport& report) {
  std::vector<std::string> ids;
  for (const auto& b : backends)
    for (const PropertyDef& p : all_properties()) ids.push_back(b->name() + "/" + p.id);
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

CheckResult run_one(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                    const Lists& lists) {
  const std::string id = backend.name() + "/" + property.id;
  if (const TestIdList::Entry* e = lists.skips ? lists.skips->match(id) : nullptr) {
    CheckResult r;
    r.property = property.id;
    r.backend = backend.name();
    r.verdict = Verdict::skipped;
    r.message = "listed in " + lists.skips->path() + ":" + std::to_string(e->line);
    print_result(r, 0.0);
    return r;
  }
  ProgressLine line(property.id + " on " + backend.name());
  CheckResult r = to_result(run_property(property, backend, settings, [&](int d, int t) { line.update(d, t); }));
  if (const TestIdList::Entry* e = lists.xfails ? lists.xfails->match(id) : nullptr)
    apply_xfail(r, *e, lists.xfails->path());
  line.clear();
  print_result(r, line.elapsed());
  return r;
}

// RC_PARAMS first, then --deep (10x its cases), then --cases and --seed.
RunSettings check_settings(const CheckOptions& options) {
  RunSettings settings = default_run_settings();
  if (options.deep) settings.max_success *= 10;
  if (options.cases) settings.max_success = *options.cases;
  if (options.deep) settings.max_size = 100;
  if (options.seed) settings.seed = *options.seed;
  if (settings.seed == 0) settings.seed = std::random_device{}();
  return settings;
}

// Everything the report says before any property has run.
CheckReport start_report(const CheckOptions& options, const RunSettings& settings,
                         const std::vector<std::unique_ptr<Backend>>& backends) {
  CheckReport report;
  report.versions = versions();
  report.seed = settings.seed;
  report.max_success = settings.max_success;
  report.max_size = settings.max_size;
  report.deep = options.deep;
  report.rc_params = std::getenv("RC_PARAMS") ? std::getenv("RC_PARAMS") : "";
  report.filter = options.filter;
  report.skips_file = options.skips_file;
  report.xfails_file = options.xfails_file;
  report.failures_dir = settings.failures_dir;
  for (const auto& b : backends) {
    BackendInfo info{b->name(), b->version(), {}};
    for (Capability c : b->capabilities()) info.capabilities.emplace_back(to_string(c));
    report.backends.push_back(std::move(info));
  }
  return report;
}

}  // namespace

int run_check_command(const CheckOptions& options) {
  register_builtin_backends();
  const RunSettings settings = check_settings(options);
  const auto backends = chosen_backends(options.backend);
  if (backends.empty()) {
    std::cerr << "attn-oracle check: unknown backend '" << options.backend << "'\n";
    return 1;
  }
  CheckReport report = start_report(options, settings, backends);
  Lists lists;
  if (!read_lists(options, backends, lists, report)) return 1;
  print_header(report);

  interrupted = 0;
  const auto previous_handler = std::signal(SIGINT, on_sigint);
  for (const PropertyDef& property : all_properties()) {
    if (property.id.rfind(options.filter, 0) != 0) continue;
    for (const auto& backend : backends)
      if (!interrupted) report.results.push_back(run_one(property, *backend, settings, lists));
  }
  std::signal(SIGINT, previous_handler);
  report.interrupted = interrupted != 0;

  print_table(report);
  std::cout << "\n" << report.count(Verdict::passed) << " passed, " << report.unexpected_failures() << " failed, "
            << report.count(Verdict::skipped) << " skipped, " << report.count(Verdict::xfail) << " expected failures, "
            << report.count(Verdict::xpass) << " unexpected passes" << (report.interrupted ? " (interrupted)" : "")
            << "\n";
  std::string error;
  if (!options.report_dir.empty()) {
    if (!write_report_files(report, options.report_dir, error)) std::cerr << "attn-oracle check: " << error << "\n";
    else std::cout << "report: " << options.report_dir << "/conformance.md, " << options.report_dir << "/conformance.json\n";
  }
  if (report.interrupted) return 130;
  return report.unexpected_failures() == 0 && error.empty() ? 0 : 1;
}

}  // namespace attn_oracle
