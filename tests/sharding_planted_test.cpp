// sharding_planted_test.cpp: every sharding property is seen to fail. Each
// planted sharding bug (tests/planted/sharding_bugs.cpp) must be caught by its
// property within the default case count and shrunk small (at most 4 devices,
// B <= 2, T <= 8); the counterexample case file reads back to the same call.
// The seed is 20261122 unless RC_PARAMS names one. Each bug's shrunk
// counterexample is pinned in fixtures/regressions/<bug>.case.json, which the
// planted backend must still get wrong and the reference right.
#include <gtest/gtest.h>

#include <iostream>

#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/sharding_case.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "planted/planted_runner.hpp"
#include "planted/sharding_bugs.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle {
namespace {

using planted::PlantedBug;

class ShardingPlantedBug : public testing::TestWithParam<PlantedBug> {};

TEST_P(ShardingPlantedBug, IsCaughtAndShrunkSmall) {
  const PlantedBug& bug = GetParam();
  PropertyOutcome o;
  ASSERT_TRUE(planted::caught(bug, o));
  EXPECT_EQ(o.message.find("generator bug"), std::string::npos) << o.message;
  const Case& c = *o.counterexample;
  const int64_t devices = c.sharding.mesh.device_count();
  const int64_t rows = c.batch.q.segment_ids.shape[0];
  const int64_t t = std::max(c.batch.q.segment_ids.shape[1], c.batch.kv.segment_ids.shape[1]);
  std::cout << "[ planted  ] " << bug.name << " caught by " << bug.property << " after " << o.cases
            << " cases; shrunk to " << devices << " devices, B=" << rows << " T=" << t << "\n";
  EXPECT_LE(devices, 4) << o.message;
  EXPECT_LE(rows, 2) << o.message;
  EXPECT_LE(t, 8) << o.message;
  ASSERT_FALSE(o.case_path.empty());
  auto reread = read_case_file(o.case_path);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  EXPECT_EQ(reread->sharding, c.sharding);
  EXPECT_EQ(reread->batch, c.batch);
}

// The planted backend disagrees with the reference on its regression fixture:
// an error the reference gives is missed or misworded, or the run is outside tolerance.
TEST_P(ShardingPlantedBug, ItsRegressionFixtureStillCatchesIt) {
  const PlantedBug& bug = GetParam();
  const std::string path = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/" + bug.name + ".case.json";
  auto c = read_case_file(path);
  ASSERT_TRUE(c.ok()) << path << ": " << c.error().message;
  ASSERT_EQ(c->op, CaseOp::sharding);
  auto planted = bug.make();
  auto reference = make_reference_backend();
  const auto got = evaluate_sharding_case(*planted->sharding(), c.value());
  const auto want = evaluate_sharding_case(*reference->sharding(), c.value());
  if (!want) {
    EXPECT_TRUE(got.ok() || got.error().code != want.error().code || got.error().message != want.error().message)
        << bug.name << " rejects " << path << " exactly as the reference does";
    return;
  }
  ASSERT_TRUE(want.value().has_value()) << path << " must run the sharded attention";
  ASSERT_TRUE(got.ok()) << got.error().message;
  const AttentionProblem problem = attention_problem(c.value());
  bool all_pass = true;
  for (const ToleranceCheck& check :
       check_attention_tolerance(problem, attention_inputs(c.value()).value(), *got.value(), *want.value()))
    all_pass = all_pass && check.pass;
  EXPECT_FALSE(all_pass) << bug.name << " passes " << path;
}

INSTANTIATE_TEST_SUITE_P(Planted, ShardingPlantedBug, testing::ValuesIn(planted::sharding_bugs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace attn_oracle
