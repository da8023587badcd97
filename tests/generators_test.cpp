// generators_test.cpp: meta tests of the input generators. Every valid draw
// passes validation; every invalid draw gives exactly its tagged code on the
// reference; the drawn mix covers what the issue asks for (printed by
// RC_CLASSIFY); showValue prints ids and positions, not tensors.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <sstream>

#include "attn_oracle/generators.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/validate.hpp"

namespace attn_oracle {
namespace {

// Some document id appears on one side of a row and not the other.
bool has_one_sided_document(const PackedBatch& b) {
  const BatchLayout l = validate(b).value();
  for (int64_t r = 0; r < l.rows(); ++r) {
    const RowView q = side_row(b.q, l.q_extra, l, r), kv = side_row(b.kv, l.kv_extra, l, r);
    for (int64_t i = 0; i < q.len; ++i) {
      bool found = q.ids[i] == 0;
      for (int64_t j = 0; j < kv.len && !found; ++j) found = kv.ids[j] == q.ids[i];
      if (!found) return true;
    }
  }
  return false;
}

// A document whose first position is not 0 (micro-sequence or striped).
bool offset_positions(const PackedSide& s) {
  for (size_t t = 0; t < s.segment_ids.data.size() && t < s.segment_pos.data.size(); ++t)
    if (s.segment_ids.data[t] != 0 && (t == 0 || s.segment_ids.data[t - 1] != s.segment_ids.data[t]) && s.segment_pos.data[t] != 0) return true;
  return false;
}

int64_t batch_rows(const PackedBatch& b) { return b.q.segment_ids.shape[b.q.segment_ids.shape.size() - 2]; }

RC_GTEST_PROP(Generators, validDrawsPassValidation, ()) {
  const PackedBatch b = *packed_batch();
  const auto checked = validate(b);
  if (!checked) RC_FAIL(checked.error().message);
  const int64_t tq = b.q.segment_ids.shape.back(), tkv = b.kv.segment_ids.shape.back();
  RC_ASSERT(b.max_segments >= 1 && b.max_segments <= 6);
  RC_ASSERT(tq <= 64 && tkv <= 64);
  RC_CLASSIFY(batch_rows(b) > 1 && tq != tkv, "cross-attention with B > 1");
  RC_CLASSIFY(std::max(tq, tkv) > 16, "T > 16");
  RC_CLASSIFY(!checked->extra.empty(), "extra dims");
  RC_CLASSIFY(is_bottom_right(b.mask) && tq > tkv, "bottom-right, q longer");
  RC_CLASSIFY(!ref::representability(b).representable, "not representable");
  RC_CLASSIFY(tq > 0 && tkv > 0 && b.q.segment_ids.data.back() != 0 && b.kv.segment_ids.data.back() != 0,
              "last document ends at the last token");
  RC_CLASSIFY(has_one_sided_document(b), "a document on one side only");
  RC_CLASSIFY(offset_positions(b.q), "q positions not from 0");
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
