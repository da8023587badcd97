// sharding_properties.cpp: the properties of DESIGN section 8, written once
// against the sharding capability. Each has a planted-bug backend in
// tests/planted/sharding_bugs.cpp that it must catch (tests/sharding_planted_test.cpp).
//
// Representability: a backend whose devices run kernels (token_level_mask() is
// false) realises the token-level mask only on representable per-device
// problems (DESIGN 4), and a context-parallel query chunk that starts inside a
// causal document or under a window is not one. Such a draw is moved to the
// nearest problem every device can represent: the same call with the `padding`
// kind and no window (all pairs of a document, positions play no part). The
// reference keeps every kind, so the position-based kinds are covered under
// context parallelism there; bottom-right kinds never meet a sharded sequence
// (sharded_execution.hpp).
#include <string>

#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/sharded_execution.hpp"
#include "attn_oracle/sharding_generators.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

std::string describe(const Error& e) { return std::string(to_string(e.code)) + ": " + e.message; }

bool every_device_representable(const ShardingDraw& d) {
  const auto problems = device_problems(d.sharding, d.problem);
  if (!problems) return false;
  for (const AttentionProblem& p : problems.value())
    if (!ref::representability(p.batch).representable) return false;
  return true;
}

ShardingDraw nearest_representable(ShardingDraw d) {
  if (every_device_representable(d)) return d;
  d.problem.batch.mask = MaskKind::padding;
  d.problem.batch.window = Window{};
  return d;
}

void classify(const ShardingDraw& d) {
  const Sharding& s = d.sharding;
  RC_CLASSIFY(s.mesh.device_count() > 1, "several devices");
  RC_CLASSIFY(shard_count(s.mesh, s.q.dims[kSequenceDim]) > 1, "context parallel");
  RC_CLASSIFY(shard_count(s.mesh, s.q.dims[kBatchDim]) > 1, "batch sharded");
  RC_CLASSIFY(shard_count(s.mesh, s.q.dims[kHeadsDim]) > 1, "heads sharded");
  RC_CLASSIFY(uses_gqa_head_exception(s), "GQA head exception");
  RC_CLASSIFY(d.problem.shape.heads_q > d.problem.shape.heads_kv, "GQA");
}

// Any valid spec triple gives the unsharded float64 result (outputs and
// gradients) within the backend's tolerance.
void valid_triples_match_unsharded_run(Backend& backend, CaseRecorder& recorder) {
  ShardingCapability& cap = *backend.sharding();
  ShardingDraw d = *sharding_draw();
  if (!cap.token_level_mask()) d = nearest_representable(d);
  RC_PRE(cap.token_level_mask() || every_device_representable(d));
  recorder.current(sharding_case(d));
  classify(d);
  const AttentionInputs inputs = generate_inputs(d.problem, d.seed);
  const ShardedShapes shapes = sharded_shapes(d.problem).value();
  if (auto e = cap.validate_sharding(d.sharding, shapes)) RC_FAIL("rejected a valid sharding: " + describe(*e));
  const Expected<AttentionResult> got = cap.sharded_attention(d.sharding, d.problem, inputs);
  if (!got) RC_FAIL("the sharded run rejected a valid call: " + describe(got.error()));
  const Expected<AttentionResult> want = ref::attention_dense_masked(d.problem, inputs);
  if (!want) RC_FAIL("generator bug: the reference rejects the unsharded problem: " + describe(want.error()));
  for (const ToleranceCheck& check : check_attention_tolerance(d.problem, inputs, got.value(), want.value()))
    if (!check.pass) RC_FAIL("sharded vs unsharded: " + check.describe());
}

// Any invalid triple is rejected, by validation and by the run alike, with the
// reference validator's code and exact message (for Q/K/V specs that differ,
// the message of DESIGN section 8), and no result is computed.
void invalid_triples_are_rejected_exactly(Backend& backend, CaseRecorder& recorder) {
  ShardingCapability& cap = *backend.sharding();
  const InvalidShardingDraw d = *invalid_sharding_draw();
  recorder.current(sharding_case(d.draw));
  RC_TAG(std::string(to_string(d.expected)));
  const ShardedShapes shapes = sharded_shapes(d.draw.problem).value();
  const std::optional<Error> want = validate_sharding(d.draw.sharding, shapes);
  if (!want || want->code != d.expected)
    RC_FAIL("generator bug: the reference validator gives " + (want ? describe(*want) : std::string("no error")) +
            " where " + std::string(to_string(d.expected)) + " was due");
  if (want->code == ErrorCode::sharding_spec_mismatch)
    RC_ASSERT(want->message == spec_mismatch_message(d.draw.sharding.q, d.draw.sharding.k, d.draw.sharding.v));
  auto judge = [&](const std::string& who, const std::optional<Error>& got) {
    if (!got) RC_FAIL(who + " accepted an invalid call that must give " + describe(*want));
    if (got->code != want->code || got->message != want->message)
      RC_FAIL(who + " gave " + describe(*got) + "\n  where the reference gives " + describe(*want));
  };
  judge("validate_sharding", cap.validate_sharding(d.draw.sharding, shapes));
  const Expected<AttentionResult> run = cap.sharded_attention(d.draw.sharding, d.draw.problem,
                                                              generate_inputs(d.draw.problem, d.draw.seed));
  judge("sharded_attention", run ? std::nullopt : std::optional<Error>(run.error()));
}

}  // namespace

std::vector<PropertyDef> sharding_properties() {
  const Capability c = Capability::sharding;
  return {
      {"sharding/validTriplesMatchTheUnshardedRun", c,
       "a valid mesh and Q/K/V/segment-id specs (batch, heads, context parallel, GQA) give the unsharded outputs and gradients within tolerance",
       valid_triples_match_unsharded_run},
      {"sharding/invalidTriplesAreRejectedWithTheExactMessage", c,
       "mismatched Q/K/V specs, unknown or repeated axes, indivisible dims, segment ids sharded unlike Q and indivisible kv heads give the reference's code and exact message, and no result",
       invalid_triples_are_rejected_exactly},
  };
}

}  // namespace attn_oracle
