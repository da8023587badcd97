// check_command.cpp: `attn-oracle check`. Prints what runs (backends, seed,
// RapidCheck parameters, environment), a live progress line per property and
// backend, then the table property x backend -> passed / FAILED / skipped with
// the cases run, and the replay line of every failure.
#include "check.hpp"

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <random>

#include "attn_oracle/property_runner.hpp"

namespace attn_oracle {
namespace {

std::vector<std::unique_ptr<Backend>> chosen_backends(const std::string& which) {
  std::vector<std::unique_ptr<Backend>> out;
  for (const std::string& name : BackendRegistry::instance().names())
    if (which == "all" || which == name) out.push_back(BackendRegistry::instance().make(name));
  return out;
}

void print_header(const RunSettings& s, const std::vector<std::unique_ptr<Backend>>& backends) {
  std::cout << "attn-oracle " << ATTN_ORACLE_VERSION << " check: seed " << s.seed << ", "
            << s.max_success << " cases per property, max_size " << s.max_size << "\n";
  for (const auto& b : backends) {
    std::cout << "  backend " << b->name() << " (" << b->version() << "):";
    for (Capability c : b->capabilities()) std::cout << " " << to_string(c);
    std::cout << "\n";
  }
  if (!builtin_backends_note().empty()) std::cout << "  " << builtin_backends_note() << "\n";
  std::cout << "  env: RC_PARAMS=" << (std::getenv("RC_PARAMS") ? std::getenv("RC_PARAMS") : "")
            << " ATTN_ORACLE_FAILURES_DIR=" << s.failures_dir << "\n\n";
}

std::string cell(const PropertyOutcome& o) {
  if (o.status == PropertyOutcome::Status::skipped) return "skipped";
  return std::string(to_string(o.status)) + " (" + std::to_string(o.cases) + ")";
}

void print_table(const std::vector<PropertyOutcome>& outcomes,
                 const std::vector<std::unique_ptr<Backend>>& backends) {
  size_t width = 8;
  for (const PropertyDef& p : all_properties()) width = std::max(width, p.id.size());
  std::cout << "\n" << std::left << std::setw(width + 2) << "property";
  for (const auto& b : backends) std::cout << std::setw(20) << b->name();
  std::cout << "\n";
  for (size_t i = 0; i < outcomes.size(); i += backends.size()) {
    std::cout << std::setw(width + 2) << outcomes[i].property;
    for (size_t k = 0; k < backends.size(); ++k) std::cout << std::setw(20) << cell(outcomes[i + k]);
    std::cout << "\n";
  }
}

}  // namespace

int run_check_command(const CheckOptions& options) {
  register_builtin_backends();
  RunSettings settings = default_run_settings();
  if (options.cases) settings.max_success = *options.cases;
  if (options.seed) settings.seed = *options.seed;
  if (settings.seed == 0) settings.seed = std::random_device{}();
  settings.quiet = true;
  const auto backends = chosen_backends(options.backend);
  if (backends.empty()) {
    std::cerr << "attn-oracle check: unknown backend '" << options.backend << "'\n";
    return 1;
  }
  print_header(settings, backends);
  std::vector<PropertyOutcome> outcomes;
  int failed = 0, passed = 0, skipped = 0;
  for (const PropertyDef& property : all_properties()) {
    if (property.id.rfind(options.filter, 0) != 0) continue;
    for (const auto& backend : backends) {
      const auto start = std::chrono::steady_clock::now();
      auto progress = [&](int done, int total) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::cerr << "\r  " << property.id << " on " << backend->name() << ": " << done << "/" << total
                  << " cases, " << std::fixed << std::setprecision(1) << s << " s   " << std::flush;
      };
      PropertyOutcome o = run_property(property, *backend, settings, progress);
      std::cerr << "\r\033[K" << std::flush;
      std::cout << "  " << std::left << std::setw(9) << to_string(o.status) << property.id << " on "
                << backend->name();
      if (o.status != PropertyOutcome::Status::skipped) std::cout << " (" << o.cases << " cases)";
      std::cout << "\n";
      if (o.status == PropertyOutcome::Status::failed || o.status == PropertyOutcome::Status::gave_up) {
        ++failed;
        std::cout << o.message << "\n";
        if (!o.case_path.empty()) std::cout << "    counterexample: " << o.case_path << "\n    replay: " << o.replay_command << "\n";
        if (!o.reproduce_params.empty()) std::cout << "    rerun: " << o.reproduce_params << " attn-oracle check --backend " << o.backend << " --filter " << o.property << "\n";
      } else if (o.status == PropertyOutcome::Status::skipped) {
        ++skipped;
      } else {
        ++passed;
      }
      outcomes.push_back(std::move(o));
    }
  }
  print_table(outcomes, backends);
  std::cout << "\n" << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace attn_oracle
