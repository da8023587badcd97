// attention_properties.cpp: the properties of docs/semantics.md#5-attention-outputs-and-gradients,
// written once against the attention capability. Floats are judged by the tolerance rule
// (tolerance.hpp): error against the float64 reference <= k x the error of a
// same-precision naive computation + eps. The metamorphic ones (permutation,
// GQA, causal window) compare a backend with itself on a transformed problem,
// within twice the budget the float64 truth gives (check_relation_tolerance: the
// budget never comes from the backend's own output), on inputs the backend
// computes the token-level mask of. Each property is a draw (an attention case
// the backend supports, plus a drawn permutation where one is used) and a check
// on the case, so a counterexample replays the exact check. Each property has a
// planted-bug backend in tests/planted/ that it must catch.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/batch_transforms.hpp"
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::inline properties {
namespace {

using nlohmann::json;

std::string describe(const Error& e) { return std::string(to_string(e.code)) + ": " + e.message; }

Case attention_case(const AttentionProblem& problem, uint64_t seed) {
  return Case{AttentionCase{problem, seed, std::nullopt}, {}, {}, {}};
}

// Draws a problem inside the backend's domain, moved to the nearest shape it
// supports (the check declines one it still does not).
// A backend without gradients (ProducedOutputs) gets forward problems only.
Case draw_supported(const DrawContext& context, AttentionOptions options = {}) {
  Backend& backend = context.backend;
  options.batch.domain = context.domain;
  options.batch.profile = context.profile;
  AttentionDraw d = *attention_draw(options);
  d.problem.shape.backward = d.problem.shape.backward && backend.outputs().gradients;
  d.problem.shape = nearest_supported_shape(
      d.problem, [&](const AttentionProblem& p) { return !attention_declines(backend, p).has_value(); });
  return attention_case(d.problem, d.seed);
}

Case draw_any(const DrawContext& context) { return draw_supported(context); }
Case draw_gqa(const DrawContext& context) { return draw_supported(context, AttentionOptions{.gqa = true}); }

// The case's problem, if valid and supported, and its inputs.
struct Drawn {
  AttentionProblem problem;
  AttentionInputs inputs;
};

Drawn supported_case(Backend& backend, const Case& c) {
  const AttentionCase& a = payload_of<AttentionCase>(c);
  const Expected<AttentionInputs> inputs = attention_inputs(a);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  if (auto e = validate_attention(a.problem, &inputs.value()); !e) decline_case("not a valid problem: " + describe(e.error()));
  require_attention_takes(backend, a.problem);
  if (a.problem.shape.backward && !backend.outputs().gradients) decline_case("the backend produces no gradients");
  return Drawn{a.problem, inputs.value()};
}

// Kernels see each document as trimmed runs and apply the index rule, which is
// the token-level mask exactly on representable inputs
// (docs/semantics.md#the-kernels-index-rule-and-representability); the others are the
// representability diagnostic's business, not a kernel bug. A backend that computes the token-level
// mask (the reference) is held to every input.
void decline_unrepresentable(Backend& backend, const AttentionProblem& p) {
  if (backend.attention()->token_level_mask()) return;
  if (const auto r = ref::representability(p.batch); !r.representable) decline_case("not representable: " + r.first_difference);
}

// Every problem a property runs (transformed ones too) is asked of the backend first.
AttentionResult run_or_fail(Backend& backend, const AttentionProblem& p, const AttentionInputs& in,
                            CheckRecord& record) {
  Expected<AttentionResult> r = call_attention(backend, p, in, record);
  if (!r) fail_with("backend rejected a valid input: ", r.error());
  return std::move(r).value();
}

// Only the outputs the backend produces are judged (the runner reports the rest as not compared).
void assert_within_tolerance(Backend& backend, const AttentionProblem& p, const AttentionInputs& in,
                             const AttentionResult& got, const AttentionResult& want, CheckRecord& record) {
  const std::vector<ToleranceCheck> checks = check_attention_tolerance(p, in, got, want, backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case(check.describe());
}

// The metamorphic properties: the backend against itself on a transformed
// problem, within twice the budget the float64 truth of `p` gives (tolerance.hpp).
void assert_relation_holds(Backend& backend, const AttentionProblem& p, const AttentionInputs& in,
                           const AttentionResult& got, const AttentionResult& expected, CheckRecord& record) {
  const std::vector<ToleranceCheck> checks = check_relation_tolerance(p, in, got, expected, backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case(check.describe());
}

void matches_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  decline_unrepresentable(backend, d.problem);
  const AttentionResult want = reference_calls().dense(d.problem, d.inputs).value();
  assert_within_tolerance(backend, d.problem, d.inputs, run_or_fail(backend, d.problem, d.inputs, record), want, record);
}

// On representable inputs the kernels' per-document view is the whole truth
// (the per-document reference applies the index rule, so only those are judged).
void matches_per_document_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  if (const auto r = ref::representability(d.problem.batch); !r.representable)
    decline_case("not representable: " + r.first_difference);
  const AttentionResult want = reference_calls().per_document(d.problem, d.inputs).value();
  assert_within_tolerance(backend, d.problem, d.inputs, run_or_fail(backend, d.problem, d.inputs, record), want, record);
}

// "o[3]" of a tensor: the first NaN, or "".
std::string first_nan(const char* name, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isnan(v[i])) return std::string(name) + "[" + std::to_string(i) + "] is NaN";
  return "";
}

// Queries that attend nothing give exactly o = 0, lse = -inf, dq = 0; keys that
// nobody attends get dk = dv = 0; nothing is NaN.
void unattended_tokens_are_exactly_zero(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  decline_unrepresentable(backend, d.problem);  // the mask below is token-level
  const AttentionResult got = run_or_fail(backend, d.problem, d.inputs, record);
  const bool has_lse = backend.outputs().lse;
  if (auto nan = first_nan("o", got.o); !nan.empty()) fail_case(nan);
  if (auto nan = has_lse ? first_nan("lse", got.lse) : ""; !nan.empty()) fail_case(nan);
  if (got.grads)
    for (auto [name, t] : {std::pair{"dq", &got.grads->dq}, std::pair{"dk", &got.grads->dk}, std::pair{"dv", &got.grads->dv}})
      if (auto nan = first_nan(name, *t); !nan.empty()) fail_case(nan);
  const BatchLayout l = validate_shapes(d.problem.batch).value();
  const AttentionShape& s = d.problem.shape;
  for (int64_t r = 0; r < l.rows(); ++r) {
    const ref::RowMask m = ref::explicit_mask(d.problem.batch, l, r, /*with_window=*/true);
    std::vector<char> key_attended(l.kv_len, 0);
    for (const ref::KeyRun& run : m.runs) std::fill(key_attended.begin() + run.first, key_attended.begin() + run.end, 1);
    for (int64_t i = 0; i < l.q_len; ++i) {
      if (m.attends(i)) continue;
      const std::string query = "row " + std::to_string(r) + " query " + std::to_string(i) + " attends nothing but ";
      for (int64_t h = 0; h < s.heads_q; ++h) {
        if (has_lse) {
          const double lse = got.lse[(r * s.heads_q + h) * l.q_len + i];
          require(std::isinf(lse) && lse < 0, query + "lse[head " + std::to_string(h) + "] = " + std::to_string(lse));
        }
        for (int64_t k = 0; k < s.head_dim; ++k) {
          const int64_t at = ((r * l.q_len + i) * s.heads_q + h) * s.head_dim + k;
          require(got.o[at] == 0.0, query + "o = " + std::to_string(got.o[at]));
          if (got.grads) require(got.grads->dq[at] == 0.0, query + "dq = " + std::to_string(got.grads->dq[at]));
        }
      }
    }
    for (int64_t j = 0; j < l.kv_len && got.grads; ++j) {
      if (key_attended[j]) continue;
      const std::string key = "row " + std::to_string(r) + " key " + std::to_string(j) + " is attended by nobody but ";
      for (int64_t k = 0; k < s.heads_kv * s.head_dim; ++k) {
        const int64_t at = (r * l.kv_len + j) * s.heads_kv * s.head_dim + k;
        require(got.grads->dk[at] == 0.0, key + "dk = " + std::to_string(got.grads->dk[at]));
        require(got.grads->dv[at] == 0.0, key + "dv = " + std::to_string(got.grads->dv[at]));
      }
    }
  }
}

// The permutation of the documents is drawn after the case and recorded with it.
Case draw_permutation(const DrawContext& context) {
  Case c = draw_supported(context);
  return with_drawn(std::move(c), {{"permutation_seed", *rc::gen::inRange<uint64_t>(0, 1000)}});
}

// Reordering the documents of a row reorders the outputs and changes nothing else.
void document_permutation_invariance(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  decline_unrepresentable(backend, d.problem);  // the budget is the token-level truth's
  const PermutedBatch perm = permute_documents(d.problem.batch, drawn_value<uint64_t>(c, "permutation_seed", 0));
  AttentionProblem p2 = d.problem;
  p2.batch = perm.batch;
  require_attention_takes(backend, p2);  // before either run: a decline costs nothing
  const AttentionShape& s = d.problem.shape;
  const int64_t wq = s.heads_q * s.head_dim, wkv = s.heads_kv * s.head_dim;
  AttentionInputs in2{gather_tokens(d.inputs.q, perm.q_from, wq), gather_tokens(d.inputs.k, perm.kv_from, wkv),
                      gather_tokens(d.inputs.v, perm.kv_from, wkv), {}};
  if (s.backward) in2.d_o = gather_tokens(d.inputs.d_o, perm.q_from, wq);
  const AttentionResult before = run_or_fail(backend, d.problem, d.inputs, record);
  // The original outputs moved to the new token order are the expectation.
  AttentionResult moved;
  moved.o = gather_tokens(before.o, perm.q_from, wq);
  const BatchLayout l = validate_shapes(d.problem.batch).value();
  const int64_t rows = l.rows(), tq = l.q_len;
  moved.lse.assign(before.lse.size(), -INFINITY);
  for (int64_t t = 0; t < rows * tq && backend.outputs().lse; ++t)
    if (perm.q_from[t] >= 0)
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const int64_t r = t / tq, old = perm.q_from[t];
        moved.lse[(r * s.heads_q + h) * tq + t % tq] = before.lse[(r * s.heads_q + h) * tq + old % tq];
      }
  if (before.grads)
    moved.grads = AttentionGradients{gather_tokens(before.grads->dq, perm.q_from, wq),
                                     gather_tokens(before.grads->dk, perm.kv_from, wkv),
                                     gather_tokens(before.grads->dv, perm.kv_from, wkv)};
  assert_relation_holds(backend, p2, in2, run_or_fail(backend, p2, in2, record), moved, record);
}

// The extreme values a draw is rewritten with (batch_transforms.hpp): an
// "unbounded" window side written as a huge number (Python's sys.maxsize, a
// C++ INT64_MAX, or just past int32), or as INT64_MIN; positions at the top of
// the int64 range. They shrink towards -1: the side as drawn.
Case with_extreme_integers(Case c) {
  const std::vector<int64_t> sides = {-1, INT64_MAX, INT64_MIN, int64_t{1} << 32, INT64_MAX - 1, int64_t{1} << 62, INT64_MIN + 1};
  const int64_t margin = *shrinking_element<int64_t>({0, 1, 2, 3});
  const int64_t left = *shrinking_element<int64_t>(sides), right = *shrinking_element<int64_t>(sides);
  return with_drawn(std::move(c), {{"margin", margin}, {"left_as", left}, {"right_as", right}});
}

PackedBatch extreme_batch_of(const Case& c, const PackedBatch& batch) {
  return at_extreme_integers(batch, drawn_value<int64_t>(c, "margin", 0), drawn_value<int64_t>(c, "left_as", -1),
                             drawn_value<int64_t>(c, "right_as", -1), drawn_value<int64_t>(c, "top", INT64_MAX));
}

// Positions go to the top of what the backend's domain takes (max_position), kept in the case for its replay.
Case draw_extreme_integers(const DrawContext& context) {
  Case c = with_extreme_integers(draw_supported(context));
  if (const int64_t top = context.domain.max_position; top > 0) c.property->drawn["top"] = top;
  return c;
}

// What the extreme form changed, since the case printed is the drawn one: "with
// the largest position moved to INT64_MAX - 1 (every position up by 9223372036854775800),
// window (-1, -1) written as (4294967296, -1)".
std::string extreme_rewrite(const PackedBatch& drawn, const PackedBatch& extreme, int64_t margin) {
  std::string out = "with the largest position moved to INT64_MAX - " + std::to_string(margin);
  for (auto [from, to] : {std::pair{&drawn.q.segment_pos.data, &extreme.q.segment_pos.data},
                          std::pair{&drawn.kv.segment_pos.data, &extreme.kv.segment_pos.data}})
    if (!from->empty()) {
      out += " (every position up by " + std::to_string(to->front() - from->front()) + ")";
      break;
    }
  const Window& w = drawn.window;
  const Window& x = extreme.window;
  if (x != w)
    out += ", window (" + std::to_string(w.left) + ", " + std::to_string(w.right) + ") written as (" +
           std::to_string(x.left) + ", " + std::to_string(x.right) + ")";
  return out;
}

// The problem with positions near INT64_MAX and huge window sides that mean the
// same: the reference gives the same result bit for bit, and the backend the
// reference's result of the original (no sum of a position and a bound may wrap).
void extreme_integers_change_nothing(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  AttentionProblem extreme = d.problem;
  extreme.batch = extreme_batch_of(c, d.problem.batch);
  require_attention_takes(backend, extreme);
  decline_unrepresentable(backend, d.problem);
  const AttentionResult want = reference_calls().dense(d.problem, d.inputs).value();
  const Expected<AttentionResult> truth = reference_calls().dense(extreme, d.inputs);
  if (!truth) fail_with("the reference rejected the extreme form: ", truth.error(), " (oracle suspect)");
  const bool same_grads = !want.grads || (truth->grads && truth->grads->dq == want.grads->dq &&
                                          truth->grads->dk == want.grads->dk && truth->grads->dv == want.grads->dv);
  if (truth->o != want.o || truth->lse != want.lse || !same_grads)
    fail_case("the reference's result changed with the extreme integers (oracle suspect)");
  record.classify(extreme.batch.window != d.problem.batch.window, "window rewritten");
  const std::string rewrite = extreme_rewrite(d.problem.batch, extreme.batch, drawn_value<int64_t>(c, "margin", 0));
  const Expected<AttentionResult> got = call_attention(backend, extreme, d.inputs, record);
  if (!got) fail_with(rewrite + ": backend rejected a valid input: ", got.error());
  const std::vector<ToleranceCheck> checks =
      check_attention_tolerance(extreme, d.inputs, got.value(), want, backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case(rewrite + ": " + check.describe());
}

// Query head h reads kv head h / (Hq / Hkv): running the GQA problem equals
// running it with every kv head repeated for the query heads that read it. The
// repeated run's dk and dv are summed back over each group of query heads.
void gqa_equals_repeated_kv_heads(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  decline_unrepresentable(backend, d.problem);  // the budget is the token-level truth's
  const AttentionShape& s = d.problem.shape;
  if (s.heads_q == s.heads_kv) decline_case("not a GQA problem");
  AttentionProblem repeated = d.problem;
  repeated.shape.heads_kv = s.heads_q;
  require_attention_takes(backend, repeated);
  const int64_t group = s.heads_q / s.heads_kv, dim = s.head_dim;
  const int64_t kv_tokens = static_cast<int64_t>(d.inputs.k.size()) / (s.heads_kv * dim);
  auto wide_at = [&](int64_t t, int64_t h) { return (t * s.heads_q + h) * dim; };
  auto narrow_at = [&](int64_t t, int64_t h) { return (t * s.heads_kv + h / group) * dim; };
  auto repeat = [&](const std::vector<double>& narrow) {
    std::vector<double> wide(kv_tokens * s.heads_q * dim);
    for (int64_t t = 0; t < kv_tokens; ++t)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t k = 0; k < dim; ++k) wide[wide_at(t, h) + k] = narrow[narrow_at(t, h) + k];
    return wide;
  };
  auto sum_back = [&](const std::vector<double>& wide) {
    std::vector<double> narrow(kv_tokens * s.heads_kv * dim, 0.0);
    for (int64_t t = 0; t < kv_tokens; ++t)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t k = 0; k < dim; ++k) narrow[narrow_at(t, h) + k] += wide[wide_at(t, h) + k];
    return narrow;
  };
  const AttentionInputs repeated_inputs{d.inputs.q, repeat(d.inputs.k), repeat(d.inputs.v), d.inputs.d_o};
  const AttentionResult wide = run_or_fail(backend, repeated, repeated_inputs, record);
  AttentionResult want{wide.o, wide.lse, std::nullopt};
  if (wide.grads) want.grads = AttentionGradients{wide.grads->dq, sum_back(wide.grads->dk), sum_back(wide.grads->dv)};
  record.classify(s.heads_kv == 1, "MQA");
  assert_relation_holds(backend, d.problem, d.inputs, run_or_fail(backend, d.problem, d.inputs, record), want, record);
}

// The windowed problem of a draw: its left bound with right bound 0, on padding
// or no_mask (the recorded case: it is the one a window bug gets wrong). A
// backend that applies the index rule gets positions from 0, which it can
// represent under both masks; the reference gets every layout.
Case draw_windowed(const DrawContext& context) {
  AttentionOptions options;
  options.batch.contiguous_positions = !context.backend.attention()->token_level_mask();
  Case c = draw_supported(context, options);
  AttentionProblem& p = std::get<AttentionCase>(c.payload).problem;
  p.batch.mask = allows_padding(p.batch.mask) ? MaskKind::padding : MaskKind::no_mask;
  p.batch.window = Window{p.batch.window.left, 0};
  return c;
}

// A window (left, 0) on a padding (no_mask) input is top-left causal by
// positions: it equals padding_causal (causal) with window (left, -1). Left is
// the drawn one, so mostly -1: the plain causal mask. Both problems must be
// representable (docs/semantics.md#the-kernels-index-rule-and-representability: kernels realise the
// token-level mask only there; matchesReference is where the rest is judged).
void causal_window_equals_top_left_causal(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  const AttentionProblem& windowed = d.problem;
  const MaskKind mask = windowed.batch.mask;
  if ((mask != MaskKind::padding && mask != MaskKind::no_mask) || windowed.batch.window.right != 0)
    decline_case("not a (left, 0) window on padding or no_mask");
  AttentionProblem causal = windowed;
  causal.batch.mask = mask == MaskKind::padding ? MaskKind::padding_causal : MaskKind::causal;
  causal.batch.window = Window{windowed.batch.window.left, -1};
  require_attention_takes(backend, causal);
  decline_unrepresentable(backend, windowed);
  decline_unrepresentable(backend, causal);
  record.classify(windowed.batch.window.left >= 0, "left bounded");
  const AttentionResult want = run_or_fail(backend, causal, d.inputs, record);
  assert_relation_holds(backend, windowed, d.inputs, run_or_fail(backend, windowed, d.inputs, record), want, record);
}

// attention_into writes every logical output (tokens that attend nothing too)
// and nothing else: o, lse, dq, dk, dv each sit between 64 NaN guard elements,
// with the interior pre-filled with the same NaN; afterwards every guard holds
// that exact bit pattern and no interior element is NaN.
void guard_bands_stay_poisoned(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c);
  GuardedAttentionBuffers buffers(d.problem, backend.outputs());
  if (auto e = call_attention_into(backend, d.problem, d.inputs, buffers.buffers(), record))
    fail_with("attention_into rejected a valid input: ", *e);
  if (auto violation = buffers.first_violation()) fail_case(*violation);
}

// ---------------------------------------------------------------- what a domain excludes

std::optional<std::string> needs_extreme_integers(const InputDomain& d) {
  if (d.positions_from_zero) return "it moves positions to the top of the int64 range";
  return std::nullopt;
}

// A (left, 0) window on padding or no_mask beside its causal twin.
std::optional<std::string> needs_window_and_its_causal_twin(const InputDomain& d) {
  if (!d.windows) return "it runs a (left, 0) window";
  const bool pair = (d.takes_mask(MaskKind::padding) && d.takes_mask(MaskKind::padding_causal)) ||
                    (d.takes_mask(MaskKind::no_mask) && d.takes_mask(MaskKind::causal));
  if (!pair) return "it needs padding and padding_causal, or no_mask and causal";
  return std::nullopt;
}

}  // namespace

std::vector<PropertyDef> attention_properties() {
  const Capability a = Capability::attention;
  return {
      {"attention/matchesReference", a, "outputs and gradients match the float64 dense-mask reference within tolerance",
       draw_any, matches_reference},
      {"attention/matchesPerDocumentReference", a, "on representable inputs, match the per-document reference",
       draw_any, matches_per_document_reference},
      {"attention/unattendedTokensAreExactlyZero", a,
       "queries that attend nothing give o = 0, lse = -inf; unattended keys get zero gradients; no NaN", draw_any,
       unattended_tokens_are_exactly_zero},
      {"attention/documentPermutationInvariance", a, "reordering documents reorders outputs and nothing else",
       draw_permutation, document_permutation_invariance},
      {"attention/gqaEqualsRepeatedKvHeads", a,
       "GQA/MQA equals the same backend with kv heads repeated (query head h reads kv head h / group); dk, dv summed "
       "back per group",
       draw_gqa, gqa_equals_repeated_kv_heads},
      {"attention/causalWindowEqualsTopLeftCausal", a,
       "window (left, 0) on padding / no_mask equals padding_causal / causal with window (left, -1) on the same backend",
       draw_windowed, causal_window_equals_top_left_causal, std::nullopt, {}, needs_window_and_its_causal_twin},
      {"attention/extremeIntegersChangeNothing", a,
       "positions near INT64_MAX and huge or INT64_MIN window sides that mean the same give the reference's result "
       "of the original",
       draw_extreme_integers, extreme_integers_change_nothing, std::nullopt, {}, needs_extreme_integers},
      {"attention/guardBandsStayPoisoned", Capability::attention_buffers,
       "attention_into leaves NaN guard bands around o, lse, dq, dk, dv untouched and writes every logical output",
       draw_any, guard_bands_stay_poisoned},
  };
}

}  // namespace attn_oracle::properties
