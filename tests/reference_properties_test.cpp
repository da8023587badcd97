// reference_properties_test.cpp: the reference checked against itself before any
// kernel enters the picture. On representable inputs the dense explicit-mask
// attention and the per-document attention on the compacted metadata agree to
// 1e-12 relative (outputs, lse and gradients). A planted per-document bug
// (bottom-right documents aligned top-left) must be caught and shrunk small.
#include <gtest/gtest.h>

#include <cmath>

#include "attn_oracle/generators.hpp"
#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle {
namespace {

using AttentionFn = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);

// max |a - b| / max(1, max |b|); infinities must sit in the same places.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

PropertyDef dense_equals_per_document(AttentionFn per_document) {
  auto body = [per_document](Backend&, CaseRecorder& recorder) {
    const AttentionDraw d = *attention_draw();
    RC_PRE(ref::representability(d.problem.batch).representable);
    Case c;
    c.op = CaseOp::attention;
    c.batch = d.problem.batch;
    c.attention = d.problem.shape;
    c.data_seed = d.seed;
    recorder.current(c);
    const AttentionInputs in = generate_inputs(d.problem, d.seed);
    const AttentionResult dense = ref::attention_dense_masked(d.problem, in).value();
    const AttentionResult docs = per_document(d.problem, in).value();
    RC_ASSERT(relative_error(docs.o, dense.o) <= 1e-12);
    RC_ASSERT(relative_error(docs.lse, dense.lse) <= 1e-12);
    if (dense.grads) {
      RC_ASSERT(docs.grads.has_value());
      RC_ASSERT(relative_error(docs.grads->dq, dense.grads->dq) <= 1e-12);
      RC_ASSERT(relative_error(docs.grads->dk, dense.grads->dk) <= 1e-12);
      RC_ASSERT(relative_error(docs.grads->dv, dense.grads->dv) <= 1e-12);
    }
  };
  return {"reference/denseEqualsPerDocument", Capability::attention,
          "dense explicit-mask attention equals per-document attention on representable inputs", body};
}

// Planted: per-document attention that anchors bottom-right documents top-left.
Expected<AttentionResult> per_document_anchored_top_left(const AttentionProblem& problem,
                                                         const AttentionInputs& in) {
  AttentionProblem p = problem;
  if (is_bottom_right(p.batch.mask))
    p.batch.mask = allows_padding(p.batch.mask) ? MaskKind::padding_causal : MaskKind::causal;
  return ref::attention_per_document(p, in);
}

TEST(ReferenceSelfCheck, DenseEqualsPerDocumentOnRepresentableInputs) {
  auto reference = make_reference_backend();
  const PropertyOutcome o = run_property(dense_equals_per_document(ref::attention_per_document),
                                         *reference, default_run_settings());
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << o.message << "\n" << o.case_path;
  EXPECT_GE(o.cases, 100);
}

TEST(ReferenceSelfCheck, CatchesPerDocumentBottomRightAnchoredTopLeft) {
  auto reference = make_reference_backend();
  const RunSettings settings = default_run_settings(20261122);
  const PropertyOutcome o =
      run_property(dense_equals_per_document(per_document_anchored_top_left), *reference, settings);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  ASSERT_TRUE(o.counterexample.has_value());
  const IntArray& ids = o.counterexample->batch.q.segment_ids;
  std::cout << "[ planted  ] per-document top-left anchoring caught after " << o.cases
            << " cases; shrunk to q ids " << shape_to_string(ids.shape) << "\n";
  EXPECT_LE(ids.shape[0], 2);
  EXPECT_LE(std::max(ids.shape[1], o.counterexample->batch.kv.segment_ids.shape[1]), 8);
}

}  // namespace
}  // namespace attn_oracle
