// reference_properties_test.cpp: the reference checked against itself before any
// kernel enters the picture. On representable inputs the dense explicit-mask
// attention and the per-document attention on the compacted metadata agree to
// 1e-12 relative (outputs, lse and gradients). A planted per-document bug
// (bottom-right documents aligned top-left) must be caught and shrunk small.
#include <gtest/gtest.h>

#include <cmath>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

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

void require_close(const char* name, const std::vector<double>& per_document, const std::vector<double>& dense) {
  const double e = relative_error(per_document, dense);
  require(e <= 1e-12, std::string(name) + ": per-document vs dense relative error " + std::to_string(e));
}

PropertyDef dense_equals_per_document(AttentionFn per_document) {
  auto draw = [](const DrawContext&) {
    const AttentionDraw d = *attention_draw();
    if (!ref::representability(d.problem.batch).representable) decline_case("not representable");
    return Case{AttentionCase{d.problem, d.seed, std::nullopt}, {}, {}, {}};
  };
  auto check = [per_document](Backend&, const Case& c, CheckRecord&) {
    const AttentionCase& a = payload_of<AttentionCase>(c);
    const AttentionInputs in = attention_inputs(a).value();
    const AttentionResult dense = ref::attention_dense_masked(a.problem, in).value();
    const AttentionResult docs = per_document(a.problem, in).value();
    require_close("o", docs.o, dense.o);
    require_close("lse", docs.lse, dense.lse);
    if (!dense.grads) return;
    require(docs.grads.has_value(), "per-document has no gradients");
    require_close("dq", docs.grads->dq, dense.grads->dq);
    require_close("dk", docs.grads->dk, dense.grads->dk);
    require_close("dv", docs.grads->dv, dense.grads->dv);
  };
  return {"reference/denseEqualsPerDocument", Capability::attention,
          "dense explicit-mask attention equals per-document attention on representable inputs", draw, check};
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
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << (o.failures.empty() ? o.message : o.failures[0].message);
  EXPECT_GE(o.passed, 60);  // the draws that are representable
}

TEST(ReferenceSelfCheck, CatchesPerDocumentBottomRightAnchoredTopLeft) {
  auto reference = make_reference_backend();
  const PropertyOutcome o =
      run_property(dense_equals_per_document(per_document_anchored_top_left), *reference, default_run_settings());
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  const PropertyFailure& f = o.failures.at(0);
  const PackedBatch& b = f.counterexample.as<AttentionCase>()->problem.batch;
  std::cout << "[ planted  ] per-document top-left anchoring caught at draw " << f.draw << "; shrunk to q ids "
            << shape_to_string(b.q.segment_ids.shape) << ": " << f.message << "\n";
  EXPECT_LE(b.q.segment_ids.shape[0], 2);
  EXPECT_LE(std::max(b.q.segment_ids.shape[1], b.kv.segment_ids.shape[1]), 8);
}

}  // namespace
}  // namespace attn_oracle
