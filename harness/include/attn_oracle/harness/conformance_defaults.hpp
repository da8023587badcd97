// conformance_defaults.hpp: where a conformance binary puts its counterexamples
// and results, and which lists it applies, unless the environment says
// otherwise. attn_oracle_add_conformance() compiles a call to
// set_conformance_defaults into the binary (its build directory and the files
// the CMake call named), so the binary behaves the same under ctest and by hand.
// Its main (conformance_main.cpp) resolves them with the environment into the
// binary's settings and registers the test suites with those.
#pragma once

#include <string>

#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle::inline harness {

struct ConformanceDefaults {
  std::string failures_dir;  // unless ATTN_ORACLE_FAILURES_DIR
  std::string results_dir;   // unless ATTN_ORACLE_RESULTS_DIR
  std::string xfails_file;   // unless ATTN_ORACLE_XFAILS
  std::string skips_file;    // unless ATTN_ORACLE_SKIPS
  std::string coverage_file; // unless ATTN_ORACLE_COVERAGE (coverage_targets.hpp)
};

// Records the defaults; returns true (so that it can initialise a static).
bool set_conformance_defaults(ConformanceDefaults defaults);
// The binary's settings: the environment over the recorded defaults, with the
// failure store on (failure_store.hpp: a conformance binary replays the
// failures of its last run first unless ATTN_ORACLE_STORE says otherwise) and
// GoogleTest's shard (GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS) taken as the
// shard of every property's draws.
Settings conformance_settings(const Environment& environment);

// The test suites a conformance binary registers with its settings, once
// GoogleTest is initialised: conformance_gtest.cpp adds the property suite
// where it is linked. add_conformance_suite returns true (to initialise a static).
using ConformanceSuite = void (*)(const Settings& settings);
bool add_conformance_suite(ConformanceSuite suite);
void register_conformance_suites(const Settings& settings);

}  // namespace attn_oracle::harness
