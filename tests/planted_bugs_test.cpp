// planted_bugs_test.cpp: every property is seen to fail. Each planted bug
// (tests/planted/) must be caught by its property within the default case count
// and shrunk to a small counterexample (B <= 2, T <= 8), which is written as a
// case file that reads back to the same case.
#include <gtest/gtest.h>

#include <set>

#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/tolerance.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

using planted::PlantedBug;

std::vector<PlantedBug> all_bugs() {
  std::vector<PlantedBug> bugs = planted::metadata_bugs();
  for (PlantedBug& b : planted::attention_bugs()) bugs.push_back(std::move(b));
  return bugs;
}

int64_t rows_of(const PackedSide& s) { return s.segment_ids.shape[s.segment_ids.shape.size() - 2]; }

class PlantedBugTest : public testing::TestWithParam<PlantedBug> {};

TEST_P(PlantedBugTest, IsCaughtAndShrunkSmall) {
  const PlantedBug& bug = GetParam();
  const PropertyDef* property = find_property(bug.property);
  ASSERT_NE(property, nullptr) << bug.property;
  RunSettings settings = default_run_settings();
  settings.seed = settings.seed ? settings.seed : 20261122;  // fixed unless RC_PARAMS sets one
  auto backend = bug.make();
  const PropertyOutcome o = run_property(*property, *backend, settings);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << bug.name << " escaped " << bug.property;
  ASSERT_TRUE(o.counterexample.has_value());
  const PackedBatch& b = o.counterexample->batch;
  const int64_t t = std::max(b.q.segment_ids.shape.back(), b.kv.segment_ids.shape.back());
  std::cout << "[ planted  ] " << bug.name << " caught by " << bug.property << " after " << o.cases
            << " cases; shrunk to B=" << rows_of(b.q) << " T=" << t << "\n";
  EXPECT_LE(rows_of(b.q), 2) << o.message;
  EXPECT_LE(t, 8) << o.message;
  ASSERT_FALSE(o.case_path.empty());
  auto reread = read_case_file(o.case_path);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  EXPECT_EQ(reread->batch, b);
  EXPECT_NE(o.replay_command.find(o.case_path), std::string::npos);
  EXPECT_NE(o.reproduce_params.find("reproduce="), std::string::npos);
}

// fixtures/regressions/<bug>.case.json pins the bug: the planted backend still
// disagrees with the reference on it.
TEST_P(PlantedBugTest, ItsRegressionFixtureStillCatchesIt) {
  const PlantedBug& bug = GetParam();
  const std::string path = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/" + bug.name + ".case.json";
  auto c = read_case_file(path);
  ASSERT_TRUE(c.ok()) << path << ": " << c.error().message;
  auto backend = bug.make();
  if (c->op == CaseOp::metadata) {
    const auto got = backend->metadata()->metadata(c->batch);
    const nlohmann::json got_json = got ? metadata_to_json(got.value()) : error_to_json(got.error());
    const bool same = c->expected->contains("error") ? got_json.contains("error") && got_json["error"]["code"] == (*c->expected)["error"]["code"]
                                                     : got_json == *c->expected;
    EXPECT_FALSE(same) << bug.name << " agrees with " << path;
    return;
  }
  const AttentionProblem problem = attention_problem(*c);
  const AttentionInputs inputs = attention_inputs(*c).value();
  const auto got = backend->attention()->attention(problem, inputs);
  ASSERT_TRUE(got.ok());
  bool all_pass = true;
  for (const ToleranceCheck& check : check_attention_tolerance(problem, inputs, got.value(), ref::attention_dense_masked(problem, inputs).value()))
    all_pass = all_pass && check.pass;
  EXPECT_FALSE(all_pass) << bug.name << " passes " << path;
}

INSTANTIATE_TEST_SUITE_P(Planted, PlantedBugTest, testing::ValuesIn(all_bugs()),
                         [](const auto& info) { return info.param.name; });

// Every property of the suite has at least one planted bug.
TEST(PlantedBugs, CoverEveryProperty) {
  std::set<std::string> covered;
  for (const PlantedBug& b : all_bugs()) covered.insert(b.property);
  for (const PropertyDef& p : all_properties()) EXPECT_TRUE(covered.count(p.id)) << p.id << " has no planted bug";
}

}  // namespace
}  // namespace attn_oracle
