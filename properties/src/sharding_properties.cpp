// sharding_properties.cpp: the properties of docs/semantics.md#9-sharding, written once
// against the sharding capability. Each has a planted-bug backend in
// tests/planted/sharding_bugs.cpp that it must catch (tests/sharding_planted_test.cpp).
//
// Each property is a draw (a sharding case; the code an invalid one must give)
// and a check on the case, so a counterexample replays the exact check.
//
// Representability: a backend whose devices run kernels (token_level_mask() is
// false) realises the token-level mask only on representable per-device
// problems (docs/semantics.md#the-kernels-index-rule-and-representability), and a context-parallel
// query chunk that starts inside a causal document or under a window is not one. Such a draw is
// moved to the nearest problem every device can represent: the same call with the `padding`
// kind and no window (all pairs of a document, positions play no part). The
// reference keeps every kind, so the position-based kinds are covered under
// context parallelism there; bottom-right kinds never meet a sharded sequence
// (sharded_execution.hpp).
#include <string>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/independent_rules.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"
#include "attn_oracle/properties/sharding_generators.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::inline properties {
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

void classify_draw(const ShardingDraw& d, CheckRecord& record) {
  const Sharding& s = d.sharding;
  record.classify(s.mesh.device_count() > 1, "several devices");
  record.classify(shard_count(s.mesh, s.q.dims[kSequenceDim]) > 1, "context parallel");
  record.classify(shard_count(s.mesh, s.q.dims[kBatchDim]) > 1, "batch sharded");
  record.classify(shard_count(s.mesh, s.q.dims[kHeadsDim]) > 1, "heads sharded");
  record.classify(uses_gqa_head_exception(s), "GQA head exception");
  record.classify(d.problem.shape.heads_q > d.problem.shape.heads_kv, "GQA");
}

// The case's sharding, problem and inputs (a sharding case that runs).
struct Drawn {
  ShardingDraw draw;
  AttentionInputs inputs;
};

Drawn drawn_of(const Case& c) {
  const ShardingCase& s = payload_of<ShardingCase>(c);
  const AttentionCase* run = std::get_if<AttentionCase>(&s.call);
  if (!run) decline_case("a shapes-only sharding case: no call to run");
  const Expected<AttentionInputs> inputs = attention_inputs(*run);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  return Drawn{ShardingDraw{s.sharding, run->problem, run->data_seed.value_or(0)}, inputs.value()};
}

// The call's shapes; a decline when the problem has none or the backend does
// not take the call (its domain, then its hook).
ShardedShapes shapes_or_decline(Backend& backend, const ShardingDraw& d) {
  const Expected<ShardedShapes> shapes = sharded_shapes(d.problem);
  if (!shapes) decline_case("not a valid problem: " + describe(shapes.error()));
  require_sharding_takes(backend, d.sharding, shapes.value(), d.problem);
  return shapes.value();
}

Case draw_valid(const DrawContext& context) {
  ShardingCapability& cap = *context.backend.sharding();
  ShardingDraw d = *sharding_draw();
  if (!cap.token_level_mask()) d = nearest_representable(d);
  return sharding_case(d);
}

// Any valid spec triple gives the unsharded float64 result (outputs and
// gradients) within the backend's tolerance.
void valid_triples_match_unsharded_run(Backend& backend, const Case& c, CheckRecord& record) {
  ShardingCapability& cap = *backend.sharding();
  const Drawn d = drawn_of(c);
  if (!cap.token_level_mask() && !every_device_representable(d.draw))
    decline_case("a device's problem is not representable");
  const ShardedShapes shapes = shapes_or_decline(backend, d.draw);
  if (auto v = agreed_sharding_verdict(d.draw.sharding, shapes, record))
    decline_case("an invalid sharding: " + v->describe());
  classify_draw(d.draw, record);
  if (auto e = cap.validate_sharding(d.draw.sharding, shapes)) fail_with("rejected a valid sharding: ", *e);
  const Expected<AttentionResult> got = cap.sharded_attention(d.draw.sharding, d.draw.problem, d.inputs);
  if (!got) fail_with("the sharded run rejected a valid call: ", got.error());
  const Expected<AttentionResult> want = reference_calls().dense(d.draw.problem, d.inputs);
  if (!want) fail_with("generator bug: the reference rejects the unsharded problem: ", want.error());
  const std::vector<ToleranceCheck> checks =
      check_attention_tolerance(d.draw.problem, d.inputs, got.value(), want.value(), backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case("sharded vs unsharded: " + check.describe());
}

Case draw_invalid(const DrawContext&) {
  const InvalidShardingDraw d = *invalid_sharding_draw();
  return with_drawn(sharding_case(d.draw), {{"expected_code", std::string(to_string(d.expected))}});
}

// Any invalid triple is rejected, by validation and by the run alike, with the
// code of the independent rules (independent_rules.hpp), which the model's
// validator must give too, naming what they name, and the model's exact message
// (for Q/K/V specs that differ, the message of docs/semantics.md#9-sharding); no result is
// computed.
void invalid_triples_are_rejected_exactly(Backend& backend, const Case& c, CheckRecord& record) {
  ShardingCapability& cap = *backend.sharding();
  const Drawn d = drawn_of(c);
  const ShardedShapes shapes = shapes_or_decline(backend, d.draw);
  const std::optional<RuleVerdict> rules = agreed_sharding_verdict(d.draw.sharding, shapes, record);
  if (!rules) decline_case("a valid sharding: validTriplesMatchTheUnshardedRun judges those");
  const std::string expected = drawn_value<std::string>(c, "expected_code", std::string(to_string(rules->code)));
  record.classify(true, expected);
  if (to_string(rules->code) != expected)
    fail_case("generator bug: the independent rules give " + rules->describe() + " where " + expected + " was due");
  const std::optional<Error> want = reference_calls().validate_sharding(d.draw.sharding, shapes);
  if (want->code == ErrorCode::sharding_spec_mismatch)
    require(want->message == spec_mismatch_message(d.draw.sharding.q, d.draw.sharding.k, d.draw.sharding.v),
            "the reference's message is not docs/semantics.md#9-sharding's: " + want->message);
  auto judge = [&](const std::string& who, const std::optional<Error>& got) {
    if (!got) fail_case(who + " accepted an invalid call that must give " + describe(*want));
    if (got->code != want->code || got->message != want->message)
      fail_case(who + " gave " + describe(*got) + " where the reference gives " + describe(*want));
  };
  judge("validate_sharding", cap.validate_sharding(d.draw.sharding, shapes));
  const Expected<AttentionResult> run = cap.sharded_attention(d.draw.sharding, d.draw.problem, d.inputs);
  judge("sharded_attention", run ? std::nullopt : std::optional<Error>(run.error()));
}

}  // namespace

std::vector<PropertyDef> sharding_properties() {
  const Capability c = Capability::sharding;
  return {
      {"sharding/validTriplesMatchTheUnshardedRun", c,
       "a valid mesh and Q/K/V/segment-id specs (batch, heads, context parallel, GQA) give the unsharded outputs and "
       "gradients within tolerance",
       draw_valid, valid_triples_match_unsharded_run},
      {"sharding/invalidTriplesAreRejectedWithTheExactMessage", c,
       "mismatched Q/K/V specs, unknown or repeated axes, indivisible dims, segment ids sharded unlike Q and "
       "indivisible kv heads give the reference's code and exact message, and no result",
       draw_invalid, invalid_triples_are_rejected_exactly},
  };
}

}  // namespace attn_oracle::properties
