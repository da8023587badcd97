// settings.hpp: what a program of the suite is told, resolved once at its edge
// and passed down as values.
//
// A program (the attn-oracle CLI, a conformance binary, a test program) reads
// the environment variables once (read_environment, environment.hpp),
// resolves them here over its own defaults, lets its flags override the
// result (cli.cpp), installs the process-wide limits once
// (install_process_settings) and hands the rest down: RunSettings, with the
// DrawSettings in it, to the runner and through it to the generators; the
// lists and the isolation to `check` and to the conformance tests. Nothing
// below the edge reads the environment, or writes it to tell another layer
// something.
//
// Tested by tests/settings_test.cpp (flags over the environment over the
// defaults) and ctest's environment_edges (no getenv or setenv past the edge).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "attn_oracle/model/environment.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/seam/process_backend.hpp"
#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle::inline harness {

struct Settings {
  // RC_PARAMS (max_success, max_size, seed), ATTN_ORACLE_FAILURES_DIR,
  // ATTN_ORACLE_STORE, ATTN_ORACLE_PROFILE, ATTN_ORACLE_SHAPE_STABLE.
  RunSettings run;
  std::string skips_file, xfails_file;  // ATTN_ORACLE_SKIPS, ATTN_ORACLE_XFAILS (test_lists.hpp)
  std::string coverage_file;            // ATTN_ORACLE_COVERAGE: coverage targets (coverage_targets.hpp)
  std::string results_dir;              // ATTN_ORACLE_RESULTS_DIR: a conformance binary's per-test results
  bool isolate = true;                  // ATTN_ORACLE_ISOLATE=0: no child processes (isolation.hpp)
  double case_timeout_seconds = 120;    // ATTN_ORACLE_CASE_TIMEOUT: an isolated trial longer than this hangs
  ProcessLimits limits;                 // ATTN_ORACLE_MEMORY_BUDGET, ATTN_ORACLE_THREADS
  double worker_timeout_seconds = kDefaultWorkerTimeout;  // ATTN_ORACLE_WORKER_TIMEOUT
  std::string arch;                     // ATTN_ORACLE_ARCH: what `arch=` list entries match (run_arch)
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES, as the job was given it (devices.hpp)
  // Two variables as they were set, for the line `check` prints of what it read.
  std::string rc_params;
  std::optional<std::string> store;
};

// The environment over `defaults`, a program's own (a conformance binary's
// directories and lists, the CLI's failure store). A value that does not parse
// leaves the default, except ATTN_ORACLE_THREADS (parse_reference_threads).
Settings resolve_settings(const Environment& environment, Settings defaults = {});

// GoogleTest's GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS as a Shard (index from
// 0); nullopt when either is unset or they do not make a shard. A
// conformance binary shards the draws of every property with it.
std::optional<Shard> gtest_shard(const Environment& environment);

// The process-wide limits (memory budget, reference threads) and the exec:
// workers' time limit, installed once at the program's edge.
void install_process_settings(const Settings& settings);

// For a program with no flags of its own (the test programs): the run settings
// from its environment over RunSettings' defaults.
RunSettings default_run_settings();

}  // namespace attn_oracle::harness
