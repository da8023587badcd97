// independent_rules_test.cpp: the independent statement of the validity rules
// (properties/include/attn_oracle/properties/independent_rules.hpp) against the model's
// validators, and the planted validator bugs of tests/planted/validator_bugs.hpp
// caught by the properties alone (no fixture) on every one of several seeds.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <chrono>
#include <iostream>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/independent_rules.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"
#include "attn_oracle/properties/sharding_generators.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "planted/validator_bugs.hpp"

namespace attn_oracle {
namespace {

PackedBatch one_row(std::vector<int64_t> ids, std::vector<int64_t> pos, int64_t max_segments, MaskKind mask) {
  PackedBatch b;
  b.mask = mask;
  b.max_segments = max_segments;
  const int64_t T = static_cast<int64_t>(ids.size());
  b.q = PackedSide{IntArray({1, T}, ids), IntArray({1, T}, pos)};
  b.kv = b.q;
  return b;
}

// The rules and the model give the same code and the model's message names
// what the rules name.
void expect_agreement(const PackedBatch& b, std::optional<ErrorCode> code) {
  const std::optional<RuleVerdict> rules = batch_rules_verdict(b);
  const Expected<BatchLayout> model = validate(b);
  ASSERT_EQ(rules.has_value(), !model.ok());
  if (!code) return;
  EXPECT_EQ(rules->code, *code) << rules->describe();
  EXPECT_EQ(model.error().code, *code) << model.error().message;
  EXPECT_TRUE(rules->named_by(model.error().message)) << rules->describe() << " vs " << model.error().message;
}

TEST(IndependentBatchRules, AgreeWithTheModelOnEachRulesEdge) {
  expect_agreement(one_row({1, 1, 2}, {0, 1, 0}, 2, MaskKind::causal), std::nullopt);
  expect_agreement(one_row({1, 2, 1}, {0, 0, 1}, 1, MaskKind::padding), ErrorCode::noncontiguous_segment);
  expect_agreement(one_row({1, 0, 1}, {0, 0, 1}, 1, MaskKind::padding), ErrorCode::noncontiguous_segment);
  expect_agreement(one_row({1, 3}, {0, 0}, 2, MaskKind::padding), ErrorCode::too_many_segments);
  expect_agreement(one_row({2, 1}, {0, 0}, 2, MaskKind::padding), ErrorCode::ids_out_of_order);
  expect_agreement(one_row({1, 0}, {0, 0}, 2, MaskKind::causal), ErrorCode::padding_with_non_padding_mask);
  expect_agreement(one_row({1, 1, 1}, {0, 1, 1}, 1, MaskKind::causal), ErrorCode::positions_not_increasing);
  expect_agreement(one_row({1, 1, 1}, {0, 2, 1}, 1, MaskKind::causal), ErrorCode::positions_not_increasing);
  expect_agreement(one_row({1, 1}, {-1, 0}, 1, MaskKind::causal), ErrorCode::negative_position);
  expect_agreement(one_row({-1, 1}, {0, 0}, 1, MaskKind::padding), ErrorCode::negative_id);
  PackedBatch bad = one_row({1}, {0}, 0, MaskKind::padding);
  expect_agreement(bad, ErrorCode::bad_max_segments);
}

TEST(IndependentShardingRules, NameTheDimOfKAndVThatDoesNotDivide) {
  Sharding s;
  s.mesh.axes = {{"context", 2}, {"tensor", 2}};
  s.q = s.k = s.v = partition_spec({{}, {"context"}, {}, {}});
  s.segment_ids = partition_spec({{}, {"context"}});
  ShardedShapes z{1, 4, 5, 2, 2, 4};
  const std::optional<RuleVerdict> rules = sharding_rules_verdict(s, z);
  ASSERT_TRUE(rules.has_value());
  EXPECT_EQ(rules->code, ErrorCode::sharding_not_divisible);
  const std::optional<Error> model = validate_sharding(s, z);
  ASSERT_TRUE(model.has_value());
  EXPECT_TRUE(rules->named_by(model->message)) << rules->describe() << " vs " << model->message;
  EXPECT_NE(rules->describe().find("k dim 1 (sequence) has size 5"), std::string::npos) << rules->describe();
  z.kv_len = 6;
  EXPECT_FALSE(sharding_rules_verdict(s, z).has_value());
  EXPECT_FALSE(validate_sharding(s, z).has_value());
  s.v.dims[kHeadsDim] = {"tensor"};  // K, V differ; neither is Q's GQA/MQA exception
  EXPECT_EQ(sharding_rules_verdict(s, z)->code, ErrorCode::sharding_spec_mismatch);
}

// The generators' tags are the rules' codes: what a planted violation must give
// is what the independent statement says it gives.
RC_GTEST_PROP(IndependentRules, AgreeWithTheInvalidBatchGeneratorsTags, ()) {
  const InvalidBatch d = *invalid_batch();
  const std::optional<RuleVerdict> rules = batch_rules_verdict(d.batch);
  RC_ASSERT(rules.has_value());
  RC_ASSERT(rules->code == d.expected);
}

RC_GTEST_PROP(IndependentRules, AgreeWithTheInvalidShardingGeneratorsTags, ()) {
  const InvalidShardingDraw d = *invalid_sharding_draw();
  const Expected<ShardedShapes> shapes = sharded_shapes(d.draw.problem);
  RC_PRE(shapes.ok());
  const std::optional<RuleVerdict> rules = sharding_rules_verdict(d.draw.sharding, shapes.value());
  RC_ASSERT(rules.has_value());
  RC_ASSERT(rules->code == d.expected);
}

// Each planted validator fails its property on every seed, by the properties
// alone, naming both answers; the shrunk case is printed with its size.
class PlantedValidatorBug : public testing::TestWithParam<planted::ValidatorBug> {};

TEST_P(PlantedValidatorBug, IsCaughtOnEverySeedByThePropertiesAlone) {
  const planted::ValidatorBug& bug = GetParam();
  const PropertyDef* property = find_property(bug.property);
  ASSERT_NE(property, nullptr);
  auto backend = make_reference_backend();
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}}) {
    RunSettings settings = default_run_settings();
    settings.seed = seed;
    settings.cases = 100;
    const auto start = std::chrono::steady_clock::now();
    PropertyOutcome o;
    {
      ScopedReferenceCalls planted(bug.oracle);
      o = run_property(*property, *backend, settings);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << bug.name << " escaped " << bug.property << " on seed " << seed;
    const PropertyFailure& f = o.failures.front();
    EXPECT_NE(f.message.find("validity rules disagree"), std::string::npos) << f.message;
    std::cout << bug.name << ", seed " << seed << ": caught at draw " << f.draw << ", " << f.shrinks << " shrinks, "
              << o.failed << " failing draws of " << o.drawn << " (" << seconds << " s): " << f.message << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Planted, PlantedValidatorBug, testing::ValuesIn(planted::validator_bugs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace attn_oracle
