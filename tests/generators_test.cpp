// generators_test.cpp: meta tests of the input generators. Every valid draw
// passes validation; every invalid draw gives exactly its tagged code on the
// reference; the drawn mix covers what the issue asks for (printed by
// RC_CLASSIFY); showValue prints ids and positions, not tensors.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <sstream>

#include "attn_oracle/generators.hpp"
#include "attn_oracle/reference_metadata.hpp"
#include "attn_oracle/validate.hpp"

namespace attn_oracle {
namespace {

int64_t batch_rows(const PackedBatch& b) { return b.q.segment_ids.shape[b.q.segment_ids.shape.size() - 2]; }

RC_GTEST_PROP(Generators, validDrawsPassValidation, ()) {
  const PackedBatch b = *packed_batch();
  const auto checked = validate(b);
  if (!checked) RC_FAIL(checked.error().message);
  const int64_t tq = b.q.segment_ids.shape.back(), tkv = b.kv.segment_ids.shape.back();
  RC_ASSERT(b.max_segments >= 1 && b.max_segments <= 7);
  RC_ASSERT(tq <= 64 && tkv <= 64);
  RC_CLASSIFY(batch_rows(b) > 1, "B > 1");
  RC_CLASSIFY(tq != tkv, "cross (Tq != Tkv)");
  RC_CLASSIFY(std::max(tq, tkv) > 16, "T > 16");
  RC_CLASSIFY(!checked->extra.empty(), "extra dims");
  RC_CLASSIFY(is_bottom_right(b.mask) && tq > tkv, "bottom-right, q longer");
  RC_CLASSIFY(!ref::representability(b).representable, "not representable");
}

RC_GTEST_PROP(Generators, invalidDrawsGiveTheirTaggedCode, ()) {
  const InvalidBatch d = *invalid_batch();
  const auto checked = validate(d.batch);
  RC_ASSERT(!checked.ok());
  RC_TAG(std::string(to_string(d.expected)));
  if (checked.error().code != d.expected)
    RC_FAIL("tagged " + std::string(to_string(d.expected)) + " but the validator says " +
            std::string(to_string(checked.error().code)) + ": " + checked.error().message);
}

RC_GTEST_PROP(Generators, attentionDrawsAreValidProblems, ()) {
  const AttentionDraw d = *attention_draw();
  const auto sizes = validate_attention(d.problem);
  if (!sizes) RC_FAIL(sizes.error().message);
  RC_ASSERT(d.problem.shape.heads_q % d.problem.shape.heads_kv == 0);
  RC_TAG(std::string(to_string(d.problem.shape.dtype)));
}

TEST(Generators, ShowValuePrintsIdsAndPositions) {
  PackedBatch b;
  b.mask = MaskKind::padding_causal;
  b.max_segments = 2;
  b.q.segment_ids = b.kv.segment_ids = IntArray({1, 3}, {1, 1, 0});
  b.q.segment_pos = b.kv.segment_pos = IntArray({1, 3}, {0, 1, 0});
  std::ostringstream os;
  showValue(b, os);
  EXPECT_NE(os.str().find("q ids  [1, 3] 1,1,0"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("mask=padding_causal"), std::string::npos);
}

}  // namespace
}  // namespace attn_oracle
