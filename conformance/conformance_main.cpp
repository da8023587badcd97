// conformance_main.cpp: the main() of every conformance binary (this
// repository's and each vendor's, attn_oracle_add_conformance). With a verb
// (`check`, `replay`, `eval`, `backends`, `report`, `promote`, ...) it is the
// attn-oracle CLI for the backends the binary registers, plus the reference,
// so that the replay lines its failures print run as printed. Without one it
// runs the GoogleTest suite (conformance_gtest.cpp).
//
// The binary's edge: the environment is read here, once (environment.hpp),
// into its settings (conformance_settings), which the verbs and the test suite
// are given. GoogleTest's sharding variables (GTEST_TOTAL_SHARDS,
// GTEST_SHARD_INDEX) shard the draws of every property rather than the list of
// tests: each shard runs every property on its share of the draws, and
// `report merge` of the shards' reports gives exactly the totals of one
// unsharded run. Under ctest's resource allocation (CTEST_RESOURCE_GROUP_*),
// only the GPUs allocated to the test are visible to it (devices.hpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "attn_oracle/harness/cli.hpp"
#include "attn_oracle/harness/conformance_defaults.hpp"
#include "attn_oracle/harness/devices.hpp"
#include "attn_oracle/harness/program.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace {

// The binary shards the draws (conformance_settings took the shard), so
// GoogleTest must not shard the tests as well: its variables are removed
// before it reads them. That is the one write to the environment, and it
// speaks to GoogleTest, not to this project. A test runner that asked (Bazel's
// TEST_SHARD_STATUS_FILE) is told that the binary shards.
void leave_sharding_to_the_draws(const attn_oracle::Environment& environment) {
  if (!attn_oracle::gtest_shard(environment)) return;
  unsetenv("GTEST_TOTAL_SHARDS");
  unsetenv("GTEST_SHARD_INDEX");
  if (const std::string status = attn_oracle::environment_value(environment, "TEST_SHARD_STATUS_FILE"); !status.empty())
    std::ofstream{status};
}

// The GPUs ctest allocated to this test (attn_oracle_add_conformance(... GPUS N), devices.hpp)
// made the only visible ones before the suite initialises CUDA: the second write to the
// environment, a message to the CUDA runtime. The allocation is consumed, so that this
// binary's own children (isolated properties, exec: workers) inherit the narrowed list.
bool use_ctest_gpu_allocation(const attn_oracle::Environment& environment) {
  const auto gpus = attn_oracle::ctest_gpu_allocation(environment);
  if (!gpus) return std::cerr << "conformance: ctest's GPU allocation: " << gpus.error().message << "\n", false;
  if (!gpus.value()) return true;
  setenv("CUDA_VISIBLE_DEVICES", gpus.value()->c_str(), 1);
  unsetenv("CTEST_RESOURCE_GROUP_COUNT");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!use_ctest_gpu_allocation(attn_oracle::read_environment())) return 1;
  const attn_oracle::Environment environment = attn_oracle::read_environment();
  const attn_oracle::Settings settings = attn_oracle::conformance_settings(environment);
  attn_oracle::install_process_settings(settings);
  leave_sharding_to_the_draws(environment);
  if (argc > 1 && attn_oracle::is_cli_verb(argv[1])) {
    attn_oracle::register_reference_backend();
    attn_oracle::CheckEnvironment env;
    env.program = attn_oracle::this_program();
    env.settings = settings;
    return attn_oracle::run_cli(std::vector<std::string>(argv + 1, argv + argc), env);
  }
  testing::InitGoogleTest(&argc, argv);
  attn_oracle::register_conformance_suites(settings);
  const int status = RUN_ALL_TESTS();
  // A --gtest_filter that selects nothing ran nothing: that is no pass.
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (unit.test_to_run_count() == 0 && testing::GTEST_FLAG(list_tests) == false) {
    std::cerr << "conformance: --gtest_filter '" << testing::GTEST_FLAG(filter) << "' selects no test; the tests are:\n";
    for (int i = 0; i < unit.total_test_suite_count(); ++i)
      for (int j = 0; j < unit.GetTestSuite(i)->total_test_count(); ++j)
        std::cerr << "  " << unit.GetTestSuite(i)->name() << "." << unit.GetTestSuite(i)->GetTestInfo(j)->name() << "\n";
    return 1;
  }
  return status;
}
