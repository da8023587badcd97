// generators_test.cpp: meta tests of the input generators. Every valid draw
// passes validation; every invalid draw gives exactly its tagged code on the
// reference; the drawn mix covers what the issue asks for (printed by
// RC_CLASSIFY); showValue prints ids and positions, not tensors.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

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

// The longest document side of a batch (tokens of one id in one row).
int64_t longest_document(const PackedBatch& b) {
  const BatchLayout l = validate(b).value();
  int64_t longest = 0;
  for (int64_t r = 0; r < l.rows(); ++r)
    for (const RowView& side : {side_row(b.q, l.q_extra, l, r), side_row(b.kv, l.kv_extra, l, r)}) {
      std::map<int64_t, int64_t> tokens;
      for (int64_t t = 0; t < side.len; ++t)
        if (side.ids[t] != 0) longest = std::max(longest, ++tokens[side.ids[t]]);
    }
  return longest;
}

// What `draws` attention draws hold, drawn as a run draws them (one Random per
// draw, sizes 0..100 in turn).
struct AttentionMix {
  int draws = 0, long_docs = 0, past_1024 = 0, long_rows = 0, group_8 = 0, kernel_dims = 0, long_with_kernel_dims = 0;
};

AttentionMix attention_mix(AttentionOptions options, int draws) {
  rc::Random random(kDefaultSeed);
  AttentionMix mix;
  const KernelTileBudget budget = kernel_tile_budget(options.batch.profile);
  for (int k = 0; k < draws; ++k) {
    const AttentionDraw d = attention_draw(options)(random.split(), k % 101).value();
    const PackedBatch& b = d.problem.batch;
    const AttentionShape& s = d.problem.shape;
    const auto sizes = validate_attention(d.problem);
    EXPECT_TRUE(sizes.ok()) << (sizes ? "" : sizes.error().message);
    if (!sizes) continue;
    const int64_t pairs = document_sizes(b).pairs, longest = longest_document(b);
    EXPECT_EQ(document_sizes(b).longest, longest);
    EXPECT_LE(pairs, budget.pairs) << "draw " << k;
    if (longest >= kLongDocMin) {
      EXPECT_LE(pairs * s.heads_q * (s.head_dim + kPairOverhead), budget.work)
          << "draw " << k << ": " << pairs << " pairs, heads " << s.heads_q << "/" << s.heads_kv << ", head_dim "
          << s.head_dim;
    }
    EXPECT_LE(sizes->rows * std::max(sizes->q_len, sizes->kv_len) * s.heads_q * s.head_dim, budget.elements) << "draw " << k;
    EXPECT_LE(sizes->rows * sizes->q_len * sizes->kv_len * s.heads_q, budget.cells) << "draw " << k;
    ++mix.draws;
    mix.long_docs += longest >= kLongDocMin;
    mix.past_1024 += longest > 1024;
    mix.long_rows += std::max(sizes->q_len, sizes->kv_len) > 8192;
    mix.group_8 += s.heads_q == 8 * s.heads_kv;
    mix.kernel_dims += s.head_dim >= 64;
    mix.long_with_kernel_dims += longest >= kLongDocMin && s.head_dim >= 64;
  }
  std::cout << "[ mix      ] " << mix.draws << " attention draws: " << mix.long_docs << " with a document of 256+ tokens ("
            << mix.past_1024 << " past 1024, " << mix.long_with_kernel_dims << " with head_dim 64+), " << mix.long_rows
            << " with a row past 8192 tokens, " << mix.group_8 << " with 8 query heads a kv head, " << mix.kernel_dims
            << " with head_dim 64+\n";
  return mix;
}

// The default attention draws reach where GPU kernels tile: documents of
// 256..4096 tokens (past 1024: the key splits) in about one draw in ten, rows
// past 8192 tokens, GQA groups of 8, head dims 64..256 (with long documents
// too), every draw inside the budget (pairs, work, elements, cells).
TEST(Generators, AttentionDrawsReachWhereKernelsTile) {
  const AttentionMix mix = attention_mix({}, 1000);
  EXPECT_GE(mix.long_docs, 60);
  EXPECT_LE(mix.long_docs, 150);
  EXPECT_GE(mix.past_1024, 30);
  EXPECT_GE(mix.long_rows, 10);
  EXPECT_GE(mix.group_8, 150);
  EXPECT_GE(mix.kernel_dims, 200);
  EXPECT_GE(mix.long_with_kernel_dims, 10);
  const AttentionMix gqa = attention_mix(AttentionOptions{.gqa = true}, 300);
  EXPECT_GE(gqa.group_8, 60);
}

// A domain of self-attention (q is kv): its documents are cut on both sides
// to the budget, never past it; a size menu keeps every draw on the menu's
// sides (size_menu_test.cpp), so no kernel-tile draw there.
TEST(Generators, KernelTileDrawsStayInsideTheDomain) {
  AttentionOptions self;
  self.batch.domain.self_attention_only = true;
  const AttentionMix mix = attention_mix(self, 300);
  EXPECT_GE(mix.long_docs, 10);
  InputDomain menu;
  menu.sizes = default_size_menu();
  AttentionOptions on_menu;
  on_menu.batch.domain = menu;
  EXPECT_EQ(attention_mix(on_menu, 200).long_docs, 0);
}

// Metadata draws in the kernel-tile mode: rows of up to 4100 tokens, long
// documents in about one draw in twelve.
TEST(Generators, MetadataDrawsReachLongRows) {
  rc::Random random(kDefaultSeed);
  BatchOptions options{.kernel_tile_weight = 2, .long_row_len = 4100};
  int long_docs = 0;
  for (int k = 0; k < 600; ++k) {
    const PackedBatch b = packed_batch(options)(random.split(), k % 101).value();
    ASSERT_TRUE(validate(b).ok());
    EXPECT_LE(std::max(b.q.segment_ids.shape.back(), b.kv.segment_ids.shape.back()), 4100);
    EXPECT_LE(document_sizes(b).pairs, kernel_tile_budget(options.profile).pairs);
    long_docs += longest_document(b) >= kLongDocMin;
  }
  std::cout << "[ mix      ] 600 metadata draws: " << long_docs << " with a document of 256+ tokens\n";
  EXPECT_GE(long_docs, 25);
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
