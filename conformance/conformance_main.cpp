// conformance_main.cpp: the main() of every conformance binary (this
// repository's and each vendor's, attn_oracle_add_conformance). With a verb
// (`check`, `replay`, `eval`, `backends`, `report`, `promote`, ...) it is the
// attn-oracle CLI for the backends the binary registers, plus the reference,
// so that the replay lines its failures print run as printed. Without one it
// runs the GoogleTest suite (conformance_gtest.cpp).
//
// GoogleTest's sharding variables (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX) shard
// the draws of every property rather than the list of tests: each shard runs
// every property on its share of the draws, and `report merge` of the shards'
// reports gives exactly the totals of one unsharded run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "attn_oracle/harness/cli.hpp"
#include "attn_oracle/harness/conformance_defaults.hpp"
#include "attn_oracle/harness/program.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace {

// Moves GoogleTest's shard to the draws (ATTN_ORACLE_SHARD, read by
// default_run_settings) and tells a test runner that asked (Bazel's
// TEST_SHARD_STATUS_FILE) that the binary shards.
void shard_draws_not_tests() {
  const char* total = std::getenv("GTEST_TOTAL_SHARDS");
  const char* index = std::getenv("GTEST_SHARD_INDEX");
  if (!total || !index) return;
  const std::string shard = std::to_string(std::atoi(index) + 1) + "/" + total;
  setenv("ATTN_ORACLE_SHARD", shard.c_str(), 1);
  unsetenv("GTEST_TOTAL_SHARDS");
  unsetenv("GTEST_SHARD_INDEX");
  if (const char* status = std::getenv("TEST_SHARD_STATUS_FILE")) std::ofstream{status};
}

}  // namespace

int main(int argc, char** argv) {
  attn_oracle::apply_conformance_defaults();
  shard_draws_not_tests();
  if (argc > 1 && attn_oracle::is_cli_verb(argv[1])) {
    attn_oracle::register_reference_backend();
    attn_oracle::CheckEnvironment env;
    env.program = attn_oracle::this_program();
    return attn_oracle::run_cli(std::vector<std::string>(argv + 1, argv + argc), env);
  }
  testing::InitGoogleTest(&argc, argv);
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
