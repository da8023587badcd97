// environment.cpp: the list of environment variables and their one reader
// (environment.hpp). The only getenv of the project's C++ code.
#include "attn_oracle/model/environment.hpp"

#include <cstdlib>

extern char** environ;

namespace attn_oracle::inline model {
namespace {

constexpr EnvironmentVariable kVariables[] = {
    {"RC_PARAMS", "RapidCheck's parameters: max_success (draws per property, 100), seed (20261122), "
                  "max_size (the size cap, at most 100)"},
    {"ATTN_ORACLE_FAILURES_DIR", "where counterexample case files go (attn-oracle-failures/; a conformance "
                                 "binary: NAME-failures/ in its build directory)"},
    {"ATTN_ORACLE_STORE", "the failure store: on (in the failures directory), off, or a directory; unset: on for "
                          "`check` and conformance binaries, off for a test program's own runs"},
    {"ATTN_ORACLE_RESULTS_DIR", "where a conformance binary writes each test's result for `report merge`"},
    {"ATTN_ORACLE_XFAILS", "the expected-failure list (a conformance binary: the file given to CMake)"},
    {"ATTN_ORACLE_SKIPS", "the skip list (a conformance binary: the file given to CMake)"},
    {"ATTN_ORACLE_COVERAGE", "coverage targets, `PROPERTY CLASS >= N` a line (a conformance binary: the file given "
                             "to CMake; check --require-coverage)"},
    {"ATTN_ORACLE_ISOLATE", "0: every property in the program's own process, no child processes (1)"},
    {"ATTN_ORACLE_CASE_TIMEOUT", "seconds without progress that make an isolated trial a hang (120)"},
    {"ATTN_ORACLE_MEMORY_BUDGET", "bytes one evaluation may ask for, with a K, M or G suffix (4G)"},
    {"ATTN_ORACLE_THREADS", "worker threads of the float64 references (the machine's cores, at most 256)"},
    {"ATTN_ORACLE_PROFILE", "the size profile of the draws: ci or deep (ci)"},
    {"ATTN_ORACLE_SHAPE_STABLE", "1: sizes from a small menu, for backends that compile per shape (off)"},
    {"ATTN_ORACLE_WORKER_TIMEOUT", "seconds an exec: backend's worker has for each reply (60)"},
    {"ATTN_ORACLE_PROGRAM", "the command the printed replay and rerun lines start with (the program itself; "
                            "python -m attn_oracle sets it to itself)"},
    {"GTEST_TOTAL_SHARDS", "GoogleTest's shard count: a conformance binary shards the draws of every property"},
    {"GTEST_SHARD_INDEX", "GoogleTest's shard index (from 0), with GTEST_TOTAL_SHARDS"},
    {"TEST_SHARD_STATUS_FILE", "a test runner's (Bazel's) file to touch when a binary shards"},
    {"ATTN_ORACLE_WRITE_REGRESSIONS", "1: the planted-bug test rewrites fixtures/regressions (tests only)"},
    {"ATTN_ORACLE_BENCH_WORKER", "the worker command the protocol benchmark times (benchmarks only)"},
    {"ATTN_ORACLE_ARCH", "the device architecture the `arch=` entries of the lists match (sm_90; unset: what "
                         "the backend says)"},
    {"CUDA_VISIBLE_DEVICES", "the devices a job was given: `check --devices` and ctest's allocation index its "
                             "list (docs/ci.md)"},
    {"CTEST_RESOURCE_GROUP_*", "ctest's resource allocation to the test (COUNT, and <i>_GPUS \"id:I,slots:S\"): "
                               "a conformance binary makes those GPUs the only visible ones"},
};

// Every variable of the process whose name starts with `prefix`.
void read_prefixed(std::string_view prefix, Environment& out) {
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos && entry.substr(0, eq).starts_with(prefix))
      out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
}

}  // namespace

std::span<const EnvironmentVariable> environment_variables() { return kVariables; }

Environment read_environment() {
  Environment out;
  for (const EnvironmentVariable& v : kVariables) {
    if (v.name.ends_with('*')) read_prefixed(v.name.substr(0, v.name.size() - 1), out);
    else if (const char* value = std::getenv(std::string(v.name).c_str())) out.emplace(v.name, value);
  }
  return out;
}

std::string environment_value(const Environment& environment, std::string_view name, std::string otherwise) {
  const auto it = environment.find(name);
  return it == environment.end() || it->second.empty() ? otherwise : it->second;
}

}  // namespace attn_oracle::model
