// sharding_test.cpp: docs/semantics.md#9-sharding piece by piece: the PartitionSpec printer,
// every validator code and their precedence, the pinned message of the design
// fixture, the generators (valid draws validate, invalid draws give their code),
// the simulation (no device runs on an invalid call, bottom-right kinds with a
// sharded sequence are unsupported, a tuple's first axis is major), case-file
// round trips, and both sharding properties passing on the reference and cpu backends.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <iostream>

#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"
#include "attn_oracle/cases/sharding_case.hpp"
#include "attn_oracle/properties/sharding_generators.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

const DimSharding None{};
DimSharding ax(std::string a) { return {std::move(a)}; }

Mesh fsdp_context(int64_t fsdp, int64_t context) { return Mesh{{{"fsdp", fsdp}, {"context", context}}}; }

Sharding same_specs(Mesh mesh, PartitionSpec q) {
  return Sharding{std::move(mesh), q, q, q, partition_spec({q.dims[0], q.dims[1]})};
}

const ShardedShapes kShapes{4, 8, 8, 4, 2, 16};

ErrorCode code_of(const Sharding& s, const ShardedShapes& z = kShapes) {
  const auto e = validate_sharding(s, z);
  return e ? e->code : ErrorCode::unsupported;  // unsupported stands for "accepted" here
}

// ------------------------------------------------------------------- printer
TEST(PartitionSpecPrinter, PrintsAsPython) {
  EXPECT_EQ(partition_spec({ax("fsdp"), None, None, None}).to_string(), "PartitionSpec('fsdp', None, None, None)");
  EXPECT_EQ(partition_spec({{"fsdp", "context"}, None}).to_string(), "PartitionSpec(('fsdp', 'context'), None)");
  EXPECT_EQ(partition_spec({}).to_string(), "PartitionSpec()");
}

// ------------------------------------------------------------------- validator
TEST(ShardingValidator, DesignSectionEightMessageNamesTheActualSpecs) {
  Sharding s = same_specs(fsdp_context(4, 1), partition_spec({ax("fsdp"), None, None, None}));
  s.v = partition_spec({None, None, None, None});
  const auto e = validate_sharding(s, kShapes);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, ErrorCode::sharding_spec_mismatch);
  EXPECT_EQ(e->message,
            "Q, K, and V sharding specs must be identical but received q_spec=PartitionSpec('fsdp', None, None, None), "
            "k_spec=PartitionSpec('fsdp', None, None, None), v_spec=PartitionSpec(None, None, None, None)");
}

TEST(ShardingValidator, AcceptsIdenticalSpecsAndTheGqaHeadException) {
  EXPECT_FALSE(validate_sharding(same_specs(fsdp_context(2, 2), partition_spec({ax("fsdp"), ax("context"), None, None})), kShapes));
  Sharding gqa = same_specs(fsdp_context(2, 2), partition_spec({ax("fsdp"), None, ax("context"), None}));
  gqa.k.dims[kHeadsDim] = gqa.v.dims[kHeadsDim] = None;
  EXPECT_TRUE(uses_gqa_head_exception(gqa));
  EXPECT_FALSE(validate_sharding(gqa, kShapes));  // heads_kv 2 over 2 shards
  EXPECT_EQ(code_of(gqa, ShardedShapes{4, 8, 8, 4, 1, 16}), ErrorCode::sharding_kv_heads_not_divisible);
  gqa.v.dims[kHeadsDim] = ax("context");  // K and V differ: no exception
  EXPECT_EQ(code_of(gqa), ErrorCode::sharding_spec_mismatch);
}

TEST(ShardingValidator, EveryCode) {
  const Sharding ok = same_specs(fsdp_context(2, 2), partition_spec({ax("fsdp"), ax("context"), None, None}));
  Sharding s = ok;
  s.mesh.axes[1].name = "fsdp";
  EXPECT_EQ(code_of(s), ErrorCode::sharding_bad_mesh);
  s = ok;
  s.mesh.axes[0].size = 0;
  EXPECT_EQ(code_of(s), ErrorCode::sharding_bad_mesh);
  s = ok;
  s.k.dims.pop_back();
  EXPECT_EQ(code_of(s), ErrorCode::sharding_bad_spec);
  s = ok;
  s.q.dims[kHeadDimDim] = ax("fsdp");
  s.q.dims[kBatchDim] = None;
  EXPECT_EQ(code_of(s), ErrorCode::sharding_bad_spec);
  s = ok;
  s.v.dims[kHeadsDim] = ax("tensor");
  EXPECT_EQ(code_of(s), ErrorCode::sharding_unknown_axis);
  s = ok;
  s.q.dims[kHeadsDim] = ax("fsdp");
  EXPECT_EQ(code_of(s), ErrorCode::sharding_repeated_axis);
  s = ok;
  s.segment_ids.dims[kBatchDim] = {"fsdp", "fsdp"};
  EXPECT_EQ(code_of(s), ErrorCode::sharding_repeated_axis);
  s = ok;
  s.segment_ids = partition_spec({ax("fsdp"), None});
  EXPECT_EQ(code_of(s), ErrorCode::sharding_segment_ids_mismatch);
  EXPECT_EQ(code_of(ok, ShardedShapes{3, 8, 8, 4, 2, 16}), ErrorCode::sharding_not_divisible);
  EXPECT_EQ(code_of(ok, ShardedShapes{4, 8, 7, 4, 2, 16}), ErrorCode::sharding_not_divisible);
  EXPECT_EQ(code_of(ok, ShardedShapes{4, 8, 8, 3, 2, 16}), ErrorCode::bad_heads);
  const auto e = validate_sharding(ok, ShardedShapes{4, 5, 8, 4, 2, 16});
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("q dim 1 (sequence) has size 5, not divisible by its 2 shards over 'context'"), std::string::npos) << e->message;
}

// Structure before agreement before sizes; q before k before v before segment ids.
TEST(ShardingValidator, Precedence) {
  Sharding s = same_specs(fsdp_context(2, 2), partition_spec({ax("fsdp"), ax("context"), None, None}));
  s.v = partition_spec({None, None, None, None});  // mismatch
  s.segment_ids = partition_spec({None, None});     // segment ids
  EXPECT_EQ(code_of(s, ShardedShapes{3, 8, 8, 4, 2, 16}), ErrorCode::sharding_spec_mismatch);
  s.v.dims[kBatchDim] = ax("pipeline");
  EXPECT_EQ(code_of(s), ErrorCode::sharding_unknown_axis);
  s.k.dims[kSequenceDim] = ax("fsdp");  // k is checked before v
  EXPECT_EQ(code_of(s), ErrorCode::sharding_repeated_axis);
  s.mesh.axes[0].size = -1;
  EXPECT_EQ(code_of(s), ErrorCode::sharding_bad_mesh);
}

TEST(ShardingValidator, DesignFixturePinsTheExactMessage) {
  const std::string path = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/design/sharding_qkv_spec_mismatch.case.json";
  const auto c = read_case_file(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const ShardingCase& s = *c->as<ShardingCase>();
  ASSERT_TRUE(std::holds_alternative<ShardedShapes>(s.call));
  EXPECT_EQ(s.sharding.mesh, fsdp_context(4, 1));
  const auto e = validate_sharding(s.sharding, std::get<ShardedShapes>(s.call));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(nlohmann::json(e->message), (*c->expected)["error"]["message"]);
  EXPECT_EQ(nlohmann::json(std::string(to_string(e->code))), (*c->expected)["error"]["code"]);
}

// ------------------------------------------------------------------- simulation
class CountingRunner final : public DeviceRunner {
 public:
  Expected<AttentionResult> run_piece(int64_t, const AttentionProblem& p, const AttentionInputs& in) override {
    ++runs;
    return ref::attention_dense_masked(p, in);
  }
  int runs = 0;
};

AttentionProblem self_attention(int64_t B, int64_t T, MaskKind mask) {
  AttentionProblem p;
  p.batch.mask = mask;
  p.batch.max_segments = 1;
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos.push_back(t);
  p.batch.q = p.batch.kv = PackedSide{IntArray::filled({B, T}, 1), IntArray({B, T}, pos)};
  p.shape = AttentionShape{4, 2, 16, std::nullopt, Dtype::fp32, true};
  return p;
}

TEST(SimulatedSharding, NoDeviceRunsOnAnInvalidCall) {
  CountingRunner runner;
  SimulatedSharding sim(runner, true);
  Sharding s = same_specs(fsdp_context(4, 1), partition_spec({ax("fsdp"), None, None, None}));
  s.v = partition_spec({None, None, None, None});
  const AttentionProblem p = self_attention(4, 8, MaskKind::causal);
  const auto r = sim.sharded_attention(s, p, generate_inputs(p, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::sharding_spec_mismatch);
  EXPECT_EQ(runner.runs, 0);
  s.v = s.q;
  ASSERT_TRUE(sim.sharded_attention(s, p, generate_inputs(p, 1)).ok());
  EXPECT_EQ(runner.runs, 4);
}

TEST(SimulatedSharding, ContextParallelCausalEqualsTheUnshardedReference) {
  CountingRunner runner;
  SimulatedSharding sim(runner, true);
  const Sharding s = same_specs(fsdp_context(2, 2), partition_spec({None, {"context", "fsdp"}, None, None}));
  const AttentionProblem p = self_attention(1, 8, MaskKind::causal);
  const AttentionInputs in = generate_inputs(p, 3);
  const auto got = sim.sharded_attention(s, p, in);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const auto want = ref::attention_dense_masked(p, in).value();
  for (size_t i = 0; i < want.o.size(); ++i) ASSERT_NEAR(got->o[i], want.o[i], 1e-12) << i;
  for (size_t i = 0; i < want.grads->dk.size(); ++i) ASSERT_NEAR(got->grads->dk[i], want.grads->dk[i], 1e-12) << i;
}

TEST(SimulatedSharding, BottomRightWithAShardedSequenceIsUnsupported) {
  CountingRunner runner;
  SimulatedSharding sim(runner, true);
  const AttentionProblem p = self_attention(2, 8, MaskKind::causal_bottom_right);
  const auto seq = sim.sharded_attention(same_specs(fsdp_context(2, 1), partition_spec({None, ax("fsdp"), None, None})), p,
                                         generate_inputs(p, 1));
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.error().code, ErrorCode::unsupported);
  EXPECT_EQ(runner.runs, 0);
  EXPECT_TRUE(sim.sharded_attention(same_specs(fsdp_context(2, 1), partition_spec({ax("fsdp"), None, None, None})), p,
                                    generate_inputs(p, 1)).ok());
}

TEST(SimulatedSharding, TupleFirstAxisIsMajorAndDevicesAreRowMajor) {
  const Sharding s = same_specs(fsdp_context(2, 2), partition_spec({{"context", "fsdp"}, None, None, None}));
  const auto pieces = plan_pieces(s, ShardedShapes{4, 2, 2, 2, 2, 4});
  ASSERT_EQ(pieces.size(), 4u);
  // device 1 = (fsdp 0, context 1): row shard context * 2 + fsdp = 2.
  EXPECT_EQ(pieces[1].row0, 2);
  EXPECT_EQ(pieces[2].row0, 1);
}

// ------------------------------------------------------------------- generators
RC_GTEST_PROP(ShardingGenerators, validDrawsPassBothValidators, ()) {
  const ShardingDraw d = *sharding_draw();
  RC_ASSERT(validate_attention(d.problem).ok());
  const auto shapes = sharded_shapes(d.problem);
  RC_ASSERT(shapes.ok());
  const auto e = validate_sharding(d.sharding, shapes.value());
  if (e) RC_FAIL(e->message);
  RC_ASSERT(device_problems(d.sharding, d.problem).ok());
  RC_CLASSIFY(shard_count(d.sharding.mesh, d.sharding.q.dims[kSequenceDim]) > 1, "context parallel");
  RC_CLASSIFY(uses_gqa_head_exception(d.sharding), "GQA head exception");
  RC_CLASSIFY(d.sharding.mesh.axes.size() == 3, "3 axes");
  RC_CLASSIFY(d.sharding.mesh.device_count() == 8, "8 devices");
}

RC_GTEST_PROP(ShardingGenerators, invalidDrawsGiveExactlyTheirCode, ()) {
  const InvalidShardingDraw d = *invalid_sharding_draw();
  RC_ASSERT(validate_attention(d.draw.problem).ok());
  const auto e = validate_sharding(d.draw.sharding, sharded_shapes(d.draw.problem).value());
  RC_ASSERT(e.has_value());
  RC_TAG(std::string(to_string(d.expected)));
  RC_ASSERT(e->code == d.expected);
}

// ------------------------------------------------------------------- case files
TEST(ShardingCase, RoundTripsBothForms) {
  const auto c = read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/design/sharding_qkv_spec_mismatch.case.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto again = case_from_json(case_to_json(c.value()));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->payload == c->payload);
  // A run case: the batch and the attention fields instead of shapes.
  ShardingDraw d;
  d.sharding = same_specs(fsdp_context(2, 1), partition_spec({ax("fsdp"), None, None, None}));
  d.problem = self_attention(2, 4, MaskKind::causal);
  d.seed = 5;
  const auto run = case_from_json(case_to_json(sharding_case(d)));
  ASSERT_TRUE(run.ok()) << run.error().message;
  const ShardingCase& s = *run->as<ShardingCase>();
  EXPECT_EQ(s.sharding, d.sharding);
  ASSERT_TRUE(std::holds_alternative<AttentionCase>(s.call));
  EXPECT_EQ(std::get<AttentionCase>(s.call).problem, d.problem);
}

TEST(ShardingCase, ReadingErrorsNameTheField) {
  nlohmann::json j = case_to_json(read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) +
                                                 "/design/sharding_qkv_spec_mismatch.case.json").value());
  j["specs"]["k"][1] = 3;
  const auto c = case_from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::bad_case);
  EXPECT_NE(c.error().message.find("specs.k[1]"), std::string::npos) << c.error().message;
}

// ------------------------------------------------------------------- properties
TEST(ShardingProperties, PassOnTheReferenceAndCpuBackends) {
  register_builtin_backends();
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = BackendRegistry::instance().make(name);
    for (const PropertyDef& p : sharding_properties()) {
      const PropertyOutcome o = run_property(p, *backend, default_run_settings());
      EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << name << " " << p.id << ": " << o.message;
      std::cout << "[ sharding ] " << p.id << " on " << name << ": " << to_string(o.status) << ", " << o.passed
                << " of " << o.drawn << " draws passed\n";
    }
  }
}

}  // namespace
}  // namespace attn_oracle
