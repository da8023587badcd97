// small_seq_generators_test.cpp: meta tests of the small-seq generators
// (small_seq_generators.cpp). Every valid draw is a small-seq problem the
// reference accepts (1..16 keys, one query per document); every invalid draw
// gives exactly its tagged code on the reference; the drawn mix (decode-like
// documents, 16 keys, windows, GQA, fully masked queries, representable
// problems) is printed by RC_CLASSIFY.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/small_seq.hpp"

namespace attn_oracle {
namespace {

RC_GTEST_PROP(SmallSeqGenerators, validDrawsAreSmallSeqProblems, ()) {
  const AttentionDraw d = *small_seq_draw();
  const AttentionInputs in = generate_inputs(d.problem, d.seed);
  const auto docs = small_seq_documents(d.problem, &in);
  if (!docs) RC_FAIL(std::string(to_string(docs.error().code)) + ": " + docs.error().message);
  RC_ASSERT(!docs->empty());
  const BatchLayout l = validate_shapes(d.problem.batch).value();
  RC_ASSERT(l.batch >= 1 && l.batch <= 3);
  bool decode_like = false, full = false, masked = false;
  for (const SmallSeqDocument& doc : *docs) {
    RC_ASSERT(doc.keys >= 1 && doc.keys <= kSmallSeqMaxKeys);
    const RowView q = side_row(d.problem.batch.q, l.q_extra, l, doc.row);
    const RowView kv = side_row(d.problem.batch.kv, l.kv_extra, l, doc.row);
    decode_like = decode_like || q.pos[doc.query] == kv.pos[doc.first_key + doc.keys - 1] + 1;
    full = full || doc.keys == kSmallSeqMaxKeys;
    const ref::RowMask m = ref::explicit_mask(d.problem.batch, l, doc.row, true);
    bool attends = false;
    for (int64_t j = 0; j < doc.keys; ++j) attends = attends || m(doc.query, doc.first_key + j);
    masked = masked || !attends;
  }
  RC_CLASSIFY(decode_like, "decode-like document");
  RC_CLASSIFY(full, "16 keys");
  RC_CLASSIFY(masked, "fully masked query");
  RC_CLASSIFY(d.problem.batch.window.left >= 0 || d.problem.batch.window.right >= 0, "window");
  RC_CLASSIFY(d.problem.shape.heads_q > d.problem.shape.heads_kv, "GQA");
  RC_CLASSIFY(ref::representability(d.problem.batch).representable, "representable");
  RC_TAG(std::string(to_string(d.problem.batch.mask)));
}

RC_GTEST_PROP(SmallSeqGenerators, invalidDrawsGiveTheirTaggedCode, ()) {
  const InvalidSmallSeq d = *invalid_small_seq();
  const AttentionInputs in = generate_inputs(d.draw.problem, d.draw.seed);
  const auto got = ref::small_seq(d.draw.problem, in);
  RC_ASSERT(!got.ok());
  RC_TAG(std::string(to_string(d.expected)));
  if (got.error().code != d.expected)
    RC_FAIL("tagged " + std::string(to_string(d.expected)) + " but the reference says " +
            std::string(to_string(got.error().code)) + ": " + got.error().message);
}

}  // namespace
}  // namespace attn_oracle
