// conformance_defaults.cpp: see conformance_defaults.hpp.
#include "attn_oracle/harness/conformance_defaults.hpp"

#include <utility>
#include <vector>

namespace attn_oracle::inline harness {
namespace {

ConformanceDefaults& stored() {
  static ConformanceDefaults defaults;
  return defaults;
}

std::vector<ConformanceSuite>& suites() {
  static std::vector<ConformanceSuite> added;
  return added;
}

}  // namespace

bool set_conformance_defaults(ConformanceDefaults defaults) {
  stored() = std::move(defaults);
  return true;
}

Settings conformance_settings(const Environment& environment) {
  const ConformanceDefaults& d = stored();
  Settings defaults;
  if (!d.failures_dir.empty()) defaults.run.failures_dir = d.failures_dir;
  defaults.results_dir = d.results_dir;
  defaults.xfails_file = d.xfails_file;
  defaults.skips_file = d.skips_file;
  defaults.coverage_file = d.coverage_file;
  defaults.run.use_store = true;
  Settings s = resolve_settings(environment, std::move(defaults));
  if (const auto shard = gtest_shard(environment)) s.run.shard = *shard;
  return s;
}

bool add_conformance_suite(ConformanceSuite suite) {
  suites().push_back(suite);
  return true;
}

void register_conformance_suites(const Settings& settings) {
  for (ConformanceSuite suite : suites()) suite(settings);
}

}  // namespace attn_oracle::harness
