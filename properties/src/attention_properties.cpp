// attention_properties.cpp: the properties of DESIGN section 5, written once
// against the attention capability. Floats are judged by the tolerance rule
// (tolerance.hpp): error against the float64 reference <= k x the error of a
// same-precision naive computation + eps. The metamorphic ones (permutation,
// GQA, causal window) compare a backend with itself on a transformed problem,
// with the same rule and the transformed run in the reference's seat. Each
// property has a planted-bug backend in tests/planted/ that it must catch.
#include <cmath>
#include <sstream>

#include "attn_oracle/batch_transforms.hpp"
#include "attn_oracle/generators.hpp"
#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/validate.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

Case attention_case(const AttentionDraw& d) { return draw_case(CaseOp::attention, d); }

AttentionDraw nearest_supported(Backend& backend, AttentionDraw d) {
  d.problem.shape = nearest_supported_shape(
      d.problem, [&](const AttentionProblem& p) { return !backend.attention()->unsupported(p).has_value(); });
  return d;
}

// Draws a problem the backend supports, records it, and returns it with its inputs.
std::pair<AttentionDraw, AttentionInputs> draw_supported(Backend& backend, CaseRecorder& recorder,
                                                         const AttentionOptions& options = {}) {
  const AttentionDraw d = nearest_supported(backend, *attention_draw(options));
  const auto reason = backend.attention()->unsupported(d.problem);
  RC_PRE(!reason.has_value());
  recorder.current(attention_case(d));
  return {d, generate_inputs(d.problem, d.seed)};
}

AttentionResult run_or_fail(Backend& backend, const AttentionProblem& p, const AttentionInputs& in) {
  Expected<AttentionResult> r = backend.attention()->attention(p, in);
  if (!r) RC_FAIL("backend rejected a valid input: " + std::string(to_string(r.error().code)) + ": " + r.error().message);
  return std::move(r).value();
}

void assert_within_tolerance(const AttentionProblem& p, const AttentionInputs& in,
                             const AttentionResult& got, const AttentionResult& want) {
  for (const ToleranceCheck& check : check_attention_tolerance(p, in, got, want))
    if (!check.pass) RC_FAIL(check.describe());
}

// Kernels see each document as trimmed runs and apply the index rule, which is
// the token-level mask exactly on representable inputs (DESIGN section 4); the
// others are the representability diagnostic's business, not a kernel bug.
void matches_reference(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  RC_PRE(ref::representability(d.problem.batch).representable);
  const AttentionResult want = ref::attention_dense_masked(d.problem, inputs).value();
  assert_within_tolerance(d.problem, inputs, run_or_fail(backend, d.problem, inputs), want);
}

// On representable inputs the kernels' per-document view is the whole truth.
void matches_per_document_reference(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  RC_PRE(ref::representability(d.problem.batch).representable);
  const AttentionResult want = ref::attention_per_document(d.problem, inputs).value();
  assert_within_tolerance(d.problem, inputs, run_or_fail(backend, d.problem, inputs), want);
}

bool any_nan(const std::vector<double>& v) {
  for (double x : v)
    if (std::isnan(x)) return true;
  return false;
}

// Queries that attend nothing give exactly o = 0, lse = -inf, dq = 0; keys that
// nobody attends get dk = dv = 0; nothing is NaN.
void unattended_tokens_are_exactly_zero(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  RC_PRE(ref::representability(d.problem.batch).representable);  // the mask is token-level
  const AttentionResult got = run_or_fail(backend, d.problem, inputs);
  RC_ASSERT(!any_nan(got.o) && !any_nan(got.lse));
  if (got.grads) RC_ASSERT(!any_nan(got.grads->dq) && !any_nan(got.grads->dk) && !any_nan(got.grads->dv));
  const BatchLayout l = validate_shapes(d.problem.batch).value();
  const AttentionShape& s = d.problem.shape;
  for (int64_t r = 0; r < l.rows(); ++r) {
    const ref::RowMask m = ref::explicit_mask(d.problem.batch, l, r, /*with_window=*/true);
    for (int64_t i = 0; i < l.q_len; ++i) {
      bool attends = false;
      for (int64_t j = 0; j < l.kv_len; ++j) attends = attends || m(i, j);
      if (attends) continue;
      for (int64_t h = 0; h < s.heads_q; ++h) {
        RC_ASSERT(std::isinf(got.lse[(r * s.heads_q + h) * l.q_len + i]));
        for (int64_t c = 0; c < s.head_dim; ++c) {
          const int64_t at = ((r * l.q_len + i) * s.heads_q + h) * s.head_dim + c;
          if (got.o[at] != 0.0) RC_FAIL("row " + std::to_string(r) + " query " + std::to_string(i) + " attends nothing but o = " + std::to_string(got.o[at]));
          if (got.grads) RC_ASSERT(got.grads->dq[at] == 0.0);
        }
      }
    }
    for (int64_t j = 0; j < l.kv_len && got.grads; ++j) {
      bool attended = false;
      for (int64_t i = 0; i < l.q_len; ++i) attended = attended || m(i, j);
      if (attended) continue;
      for (int64_t c = 0; c < s.heads_kv * s.head_dim; ++c) {
        RC_ASSERT(got.grads->dk[(r * l.kv_len + j) * s.heads_kv * s.head_dim + c] == 0.0);
        RC_ASSERT(got.grads->dv[(r * l.kv_len + j) * s.heads_kv * s.head_dim + c] == 0.0);
      }
    }
  }
}

// Reordering the documents of a row reorders the outputs and changes nothing else.
void document_permutation_invariance(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  const PermutedBatch perm = permute_documents(d.problem.batch, *rc::gen::inRange<uint64_t>(0, 1000));
  AttentionProblem p2 = d.problem;
  p2.batch = perm.batch;
  const AttentionShape& s = d.problem.shape;
  const int64_t wq = s.heads_q * s.head_dim, wkv = s.heads_kv * s.head_dim;
  AttentionInputs in2{gather_tokens(inputs.q, perm.q_from, wq), gather_tokens(inputs.k, perm.kv_from, wkv),
                      gather_tokens(inputs.v, perm.kv_from, wkv), {}};
  if (s.backward) in2.d_o = gather_tokens(inputs.d_o, perm.q_from, wq);
  const AttentionResult before = run_or_fail(backend, d.problem, inputs);
  // The original outputs moved to the new token order are the expectation.
  AttentionResult moved;
  moved.o = gather_tokens(before.o, perm.q_from, wq);
  const int64_t rows = d.problem.batch.q.segment_ids.shape[0], tq = d.problem.batch.q.segment_ids.shape[1];
  moved.lse.assign(before.lse.size(), -INFINITY);
  for (int64_t t = 0; t < rows * tq; ++t)
    if (perm.q_from[t] >= 0)
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const int64_t r = t / tq, old = perm.q_from[t];
        moved.lse[(r * s.heads_q + h) * tq + t % tq] = before.lse[(r * s.heads_q + h) * tq + old % tq];
      }
  if (before.grads)
    moved.grads = AttentionGradients{gather_tokens(before.grads->dq, perm.q_from, wq),
                                     gather_tokens(before.grads->dk, perm.kv_from, wkv),
                                     gather_tokens(before.grads->dv, perm.kv_from, wkv)};
  assert_within_tolerance(p2, in2, run_or_fail(backend, p2, in2), moved);
}

// Query head h reads kv head h / (Hq / Hkv): running the GQA problem equals
// running it with every kv head repeated for the query heads that read it. The
// repeated run's dk and dv are summed back over each group of query heads.
void gqa_equals_repeated_kv_heads(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder, AttentionOptions{.gqa = true});
  const AttentionShape& s = d.problem.shape;
  AttentionProblem repeated = d.problem;
  repeated.shape.heads_kv = s.heads_q;
  RC_PRE(!backend.attention()->unsupported(repeated).has_value());
  const int64_t group = s.heads_q / s.heads_kv, dim = s.head_dim;
  const int64_t kv_tokens = static_cast<int64_t>(inputs.k.size()) / (s.heads_kv * dim);
  auto wide_at = [&](int64_t t, int64_t h) { return (t * s.heads_q + h) * dim; };
  auto narrow_at = [&](int64_t t, int64_t h) { return (t * s.heads_kv + h / group) * dim; };
  auto repeat = [&](const std::vector<double>& narrow) {
    std::vector<double> wide(kv_tokens * s.heads_q * dim);
    for (int64_t t = 0; t < kv_tokens; ++t)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t c = 0; c < dim; ++c) wide[wide_at(t, h) + c] = narrow[narrow_at(t, h) + c];
    return wide;
  };
  auto sum_back = [&](const std::vector<double>& wide) {
    std::vector<double> narrow(kv_tokens * s.heads_kv * dim, 0.0);
    for (int64_t t = 0; t < kv_tokens; ++t)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t c = 0; c < dim; ++c) narrow[narrow_at(t, h) + c] += wide[wide_at(t, h) + c];
    return narrow;
  };
  const AttentionInputs repeated_inputs{inputs.q, repeat(inputs.k), repeat(inputs.v), inputs.d_o};
  const AttentionResult wide = run_or_fail(backend, repeated, repeated_inputs);
  AttentionResult want{wide.o, wide.lse, std::nullopt};
  if (wide.grads)
    want.grads = AttentionGradients{wide.grads->dq, sum_back(wide.grads->dk), sum_back(wide.grads->dv)};
  RC_CLASSIFY(s.heads_kv == 1, "MQA");
  assert_within_tolerance(d.problem, inputs, run_or_fail(backend, d.problem, inputs), want);
}

// A window (left, 0) on a padding (no_mask) input is top-left causal by
// positions: it equals padding_causal (causal) with window (left, -1). Left is
// the drawn one, so mostly -1: the plain causal mask. Both problems must be
// representable (DESIGN section 4: kernels realise the token-level mask only
// there; matchesReference is where the rest is judged). The windowed problem is
// the recorded case (it is the one a window bug gets wrong).
void causal_window_equals_top_left_causal(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  const bool padding = allows_padding(d.problem.batch.mask);
  const int64_t left = d.problem.batch.window.left;
  AttentionProblem windowed = d.problem, causal = d.problem;
  windowed.batch.mask = padding ? MaskKind::padding : MaskKind::no_mask;
  windowed.batch.window = Window{left, 0};
  causal.batch.mask = padding ? MaskKind::padding_causal : MaskKind::causal;
  causal.batch.window = Window{left, -1};
  RC_PRE(!backend.attention()->unsupported(windowed).has_value());
  RC_PRE(!backend.attention()->unsupported(causal).has_value());
  RC_PRE(ref::representability(windowed.batch).representable && ref::representability(causal.batch).representable);
  recorder.current(attention_case(AttentionDraw{windowed, d.seed}));
  RC_CLASSIFY(left >= 0, "left bounded");
  const AttentionResult want = run_or_fail(backend, causal, inputs);
  assert_within_tolerance(windowed, inputs, run_or_fail(backend, windowed, inputs), want);
}

// attention_into writes every logical output (tokens that attend nothing too)
// and nothing else: o, lse, dq, dk, dv each sit between 64 NaN guard elements,
// with the interior pre-filled with the same NaN; afterwards every guard holds
// that exact bit pattern and no interior element is NaN.
void guard_bands_stay_poisoned(Backend& backend, CaseRecorder& recorder) {
  const auto [d, inputs] = draw_supported(backend, recorder);
  GuardedAttentionBuffers buffers(d.problem);
  if (auto e = backend.attention()->attention_into(d.problem, inputs, buffers.buffers()))
    RC_FAIL("attention_into rejected a valid input: " + std::string(to_string(e->code)) + ": " + e->message);
  if (auto violation = buffers.first_violation()) RC_FAIL(*violation);
}

}  // namespace

std::vector<PropertyDef> attention_properties() {
  const Capability c = Capability::attention;
  return {
      {"attention/matchesReference", c, "outputs and gradients match the float64 dense-mask reference within tolerance", matches_reference},
      {"attention/matchesPerDocumentReference", c, "on representable inputs, match the per-document reference", matches_per_document_reference},
      {"attention/unattendedTokensAreExactlyZero", c, "queries that attend nothing give o = 0, lse = -inf; unattended keys get zero gradients; no NaN", unattended_tokens_are_exactly_zero},
      {"attention/documentPermutationInvariance", c, "reordering documents reorders outputs and nothing else", document_permutation_invariance},
      {"attention/gqaEqualsRepeatedKvHeads", c, "GQA/MQA equals the same backend with kv heads repeated (query head h reads kv head h / group); dk, dv summed back per group", gqa_equals_repeated_kv_heads},
      {"attention/causalWindowEqualsTopLeftCausal", c, "window (left, 0) on padding / no_mask equals padding_causal / causal with window (left, -1) on the same backend", causal_window_equals_top_left_causal},
      {"attention/guardBandsStayPoisoned", Capability::attention_buffers, "attention_into leaves NaN guard bands around o, lse, dq, dk, dv untouched and writes every logical output", guard_bands_stay_poisoned},
  };
}

}  // namespace attn_oracle
