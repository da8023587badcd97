// small_seq_properties.cpp: the properties of docs/semantics.md#8-small-sequence-problems, written
// once against the small-seq capability. Floats are judged by the tolerance rule
// (small_seq_checks.hpp): o and P like outputs (k = 2), gradients k = 3, against
// the float64 ref::small_seq; error codes exactly. matchesGeneralAttention puts
// the same backend's general attention against its small-seq path, within twice
// the budget the float64 truth gives (check_relation_tolerance). Each property
// is a draw (a small_seq case the backend supports; the code an invalid draw
// must give) and a check on the case. Each has a planted-bug backend in
// tests/planted/small_seq_bugs.cpp that it must catch (tests/planted_bugs_test.cpp).
#include <cmath>
#include <string>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/cases/small_seq_checks.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/small_seq.hpp"

namespace attn_oracle::inline properties {
namespace {

std::string describe(const Error& e) { return std::string(to_string(e.code)) + ": " + e.message; }

Case small_seq_case(const AttentionDraw& d) {
  return Case{SmallSeqCase{AttentionCase{d.problem, d.seed, std::nullopt}}, {}, {}, {}};
}

AttentionShape nearest_supported(Backend& backend, const AttentionProblem& problem) {
  return nearest_supported_shape(problem, [&](const AttentionProblem& p) { return !small_seq_declines(backend, p).has_value(); });
}

// Draws a small-seq problem, moved to the nearest shape the backend supports
// (forward only for a backend without gradients).
Case draw_supported(const DrawContext& context) {
  Backend& backend = context.backend;
  AttentionDraw d = *small_seq_draw(SmallSeqOptions{.domain = context.domain});
  d.problem.shape.backward = d.problem.shape.backward && backend.outputs().gradients;
  d.problem.shape = nearest_supported(backend, d.problem);
  return small_seq_case(d);
}

struct Drawn {
  AttentionProblem problem;
  AttentionInputs inputs;
};

// A valid, supported small-seq case and its inputs.
Drawn supported_case(Backend& backend, const Case& c, CheckRecord& record) {
  const SmallSeqCase& s = payload_of<SmallSeqCase>(c);
  const Expected<AttentionInputs> inputs = attention_inputs(s);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  if (auto docs = small_seq_documents(s.problem, &inputs.value()); !docs)
    decline_case("not a valid small-seq problem (" + describe(docs.error()) + "); rejectsInvalidInputsWithTheirCode judges those");
  require_small_seq_takes(backend, s.problem);
  if (s.problem.shape.backward && !backend.outputs().gradients) decline_case("the backend produces no gradients");
  record.classify(s.problem.shape.heads_q > s.problem.shape.heads_kv, "GQA");
  record.classify(s.problem.batch.window.left >= 0 || s.problem.batch.window.right >= 0, "window");
  return Drawn{s.problem, inputs.value()};
}

SmallSeqResult run_or_fail(Backend& backend, const AttentionProblem& p, const AttentionInputs& in, CheckRecord& record) {
  Expected<SmallSeqResult> r = call_small_seq(backend, p, in, record);
  if (!r) fail_with("backend rejected a valid small-seq input: ", r.error());
  return std::move(r).value();
}

void assert_within_tolerance(const std::vector<ToleranceCheck>& checks, CheckRecord& record) {
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case(check.describe());
}

// o, P and the gradients against the float64 reference.
void matches_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c, record);
  const SmallSeqResult want = ref::small_seq(d.problem, d.inputs).value();
  assert_within_tolerance(
      check_small_seq_tolerance(d.problem, d.inputs, run_or_fail(backend, d.problem, d.inputs, record), want, backend.outputs()), record);
}

// The small-seq path and the same backend's general fused attention agree on o
// and the gradients. Kernels realise the token-level mask only on representable
// inputs (docs/semantics.md#the-kernels-index-rule-and-representability), so the others are
// declined; decode-like documents under top-left causal never are (the query is past its keys),
// which is why the generator also puts queries at position 0.
void matches_general_attention(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c, record);
  require_attention_takes(backend, d.problem);
  if (!backend.attention()->token_level_mask())
    if (const auto r = ref::representability(d.problem.batch); !r.representable)
      decline_case("not representable: " + r.first_difference);
  const SmallSeqResult small = run_or_fail(backend, d.problem, d.inputs, record);
  Expected<AttentionResult> general = call_attention(backend, d.problem, d.inputs, record);
  if (!general) fail_with("the backend's attention rejected a valid input: ", general.error());
  // Two runs of one backend: the budget is the float64 truth's (tolerance.hpp), lse aside.
  const AttentionResult got{small.o, general->lse, small.grads};
  assert_within_tolerance(check_relation_tolerance(d.problem, d.inputs, got, general.value(), backend.outputs()), record);
}

// P [docs, Hq, 16]: a query that attends some key has a row summing to 1 over
// its document's unmasked keys (within the dtype's floor); masked slots and
// slots past the keys are exactly 0; a query that attends nothing has a zero row.
void probability_rows_sum_to_one(Backend& backend, const Case& c, CheckRecord& record) {
  const Drawn d = supported_case(backend, c, record);
  const std::vector<SmallSeqDocument> docs = small_seq_documents(d.problem, &d.inputs).value();
  const SmallSeqResult got = run_or_fail(backend, d.problem, d.inputs, record);
  const int64_t Hq = d.problem.shape.heads_q, width = kSmallSeqMaxKeys;
  if (got.p.size() != docs.size() * Hq * width)
    fail_case("P has " + std::to_string(got.p.size()) + " elements, expected [" + std::to_string(docs.size()) + ", " +
              std::to_string(Hq) + ", 16]");
  const BatchLayout l = validate_shapes(d.problem.batch).value();
  const double eps = tolerance_floor(d.problem.shape.dtype);
  for (size_t k = 0; k < docs.size(); ++k) {
    const SmallSeqDocument& doc = docs[k];
    const ref::RowMask mask = ref::explicit_mask(d.problem.batch, l, doc.row, /*with_window=*/true);
    bool attends = false;
    for (int64_t j = 0; j < doc.keys; ++j) attends = attends || mask(doc.query, doc.first_key + j);
    record.classify(!attends, "fully masked query");
    for (int64_t h = 0; h < Hq; ++h) {
      const double* row = &got.p[(k * Hq + h) * width];
      const std::string at = "P[doc " + std::to_string(k) + ", head " + std::to_string(h) + "]";
      double sum = 0.0;
      for (int64_t j = 0; j < width; ++j) {
        const bool live = j < doc.keys && mask(doc.query, doc.first_key + j);
        if (std::isnan(row[j])) fail_case(at + " slot " + std::to_string(j) + " is NaN");
        if (!live && row[j] != 0.0)
          fail_case(at + " slot " + std::to_string(j) + " is " + std::to_string(row[j]) + ", expected exactly 0 (" +
                    (j >= doc.keys ? "past the document's " + std::to_string(doc.keys) + " keys" : std::string("a masked key")) + ")");
        sum += row[j];
      }
      if (attends && std::fabs(sum - 1.0) > eps)
        fail_case(at + " sums to " + std::to_string(sum) + " over " + std::to_string(doc.keys) +
                  " keys, expected 1 within " + std::to_string(eps));
    }
  }
}

// A shape the backend supports, asked on a one-document problem (unsupported()
// may assume a valid problem): the invalid draw's head dim and dtype move to it.
AttentionShape supported_shape(Backend& backend, const AttentionShape& shape) {
  AttentionProblem probe;
  probe.batch.mask = MaskKind::padding;
  probe.batch.max_segments = 1;
  probe.batch.q.segment_ids = IntArray({1, 1}, {1});
  probe.batch.q.segment_pos = IntArray({1, 1}, {1});
  probe.batch.kv.segment_ids = IntArray({1, 1}, {1});
  probe.batch.kv.segment_pos = IntArray({1, 1}, {0});
  probe.shape = shape;
  probe.shape.heads_q = probe.shape.heads_kv = 1;
  AttentionShape out = shape;
  const AttentionShape near = nearest_supported(backend, probe);
  out.head_dim = near.head_dim;
  out.dtype = near.dtype;
  return out;
}

Case draw_invalid(const DrawContext& context) {
  InvalidSmallSeq draw = *invalid_small_seq();
  draw.draw.problem.shape = supported_shape(context.backend, draw.draw.problem.shape);
  return with_drawn(small_seq_case(draw.draw), {{"expected_code", std::string(to_string(draw.expected))}});
}

// The code the generator planted (drawn); a replayed case without one is held to the reference's.
void rejects_invalid_inputs(Backend& backend, const Case& c, CheckRecord& record) {
  const SmallSeqCase& s = payload_of<SmallSeqCase>(c);
  const Expected<AttentionInputs> inputs = attention_inputs(s);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  const Expected<SmallSeqResult> want = ref::small_seq(s.problem, inputs.value());
  const std::string expected =
      drawn_value<std::string>(c, "expected_code", want ? "" : std::string(to_string(want.error().code)));
  if (expected.empty()) decline_case("a valid input: matchesReference judges those");
  record.classify(true, expected);
  // The hook may assume a valid problem: only the domain is asked here.
  require_inside_domain(backend, s.problem);
  const Expected<SmallSeqResult> got = backend.small_seq()->small_seq(s.problem, inputs.value());
  if (got) fail_case("accepted an input that must give " + expected);
  decline_if_unsupported(got.error());
  if (to_string(got.error().code) != expected)
    fail_with("gave ", got.error(), " where " + expected + " was due");
}

// One query per document against 1..16 keys: never one batch for both sides.
std::optional<std::string> needs_cross_attention(const InputDomain& d) {
  if (d.self_attention_only) return "a small-seq problem is cross-attention (one query against up to 16 keys)";
  return std::nullopt;
}

}  // namespace

std::vector<PropertyDef> small_seq_properties() {
  const Capability c = Capability::small_seq;
  return {
      {"small_seq/matchesReference", c,
       "o, P and gradients match the float64 small-seq reference within tolerance (P judged like o)", draw_supported,
       matches_reference, std::nullopt, {}, needs_cross_attention},
      {"small_seq/matchesGeneralAttention", c,
       "on representable inputs, o and gradients equal the same backend's general attention within tolerance",
       draw_supported, matches_general_attention, Capability::attention, {}, needs_cross_attention},
      {"small_seq/probabilityRowsSumToOneAndZeroPastKeys", c,
       "P rows sum to 1 over the document's unmasked keys; masked slots, slots past the keys and rows of queries that "
       "attend nothing are exactly 0",
       draw_supported, probability_rows_sum_to_one, std::nullopt, {Output::small_seq_p}, needs_cross_attention},
      {"small_seq/rejectsInvalidInputsWithTheirCode", c,
       "two queries in a document, 0 or 17+ keys, heads_q % heads_kv != 0 give exactly their code", draw_invalid,
       rejects_invalid_inputs, std::nullopt, {}, needs_cross_attention},
  };
}

}  // namespace attn_oracle::properties
