// metadata_through_attention_test.cpp: the float64 varlen kernel that judges
// metadata by what it does to attention is a faithful kernel: driven by the
// reference's metadata on representable inputs it computes the per-document
// reference's attention; it reports an out-of-bounds read instead of making it;
// and a wrong integer shows as the output it changes, with the field named.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/metadata_through_attention.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle {
namespace {

RC_GTEST_PROP(MetadataThroughAttention, ReferenceMetadataComputesThePerDocumentReference, ()) {
  const PackedBatch batch = *packed_batch();
  RC_PRE(ref::representability(batch).representable);
  const Metadata md = ref::metadata(batch).value();
  VarlenInputs in = poisoned_inputs(batch, md);
  for (auto* t : {&in.q, &in.k, &in.v})
    for (double& x : *t) x = std::isnan(x) ? 0.0 : round_to_dtype(x, Dtype::fp32);
  const auto ran = consume_metadata(md, batch.mask, batch.window, in);
  RC_ASSERT(std::holds_alternative<VarlenOutputs>(ran));
  const AttentionProblem problem{batch, AttentionShape{1, 1, in.dim, std::nullopt, Dtype::fp32, false}};
  const AttentionResult want = ref::attention_per_document(problem, AttentionInputs{in.q, in.k, in.v, {}}).value();
  const VarlenOutputs& got = std::get<VarlenOutputs>(ran);
  for (size_t i = 0; i < want.o.size(); ++i) RC_ASSERT(std::abs(got.o[i] - want.o[i]) <= 1e-12);
  for (size_t i = 0; i < want.lse.size(); ++i)
    RC_ASSERT(got.lse[i] == want.lse[i] || std::abs(got.lse[i] - want.lse[i]) <= 1e-12);
}

PackedBatch two_documents() {
  PackedBatch b;
  b.mask = MaskKind::padding_causal;
  b.max_segments = 2;
  b.q.segment_ids = IntArray{{1, 4}, {0, 1, 1, 2}};
  b.q.segment_pos = IntArray{{1, 4}, {0, 0, 1, 0}};
  b.kv = b.q;
  return b;
}

TEST(MetadataThroughAttention, AnOutOfBoundsReadIsReportedNotMade) {
  const PackedBatch batch = two_documents();
  const Metadata want = ref::metadata(batch).value();
  Metadata got = want;
  got.ragged_offsets_kv[1] = 3, got.cu_seqlens_kv[2] = got.cu_seqlens_kv[1] + 2;  // keys [3, 5) of 4
  const auto difference = attention_difference(batch, got, want);
  ASSERT_TRUE(difference);
  EXPECT_NE(difference->find("reads out of bounds: document 1 reads 2 kv tokens from token 3"), std::string::npos) << *difference;
}

TEST(MetadataThroughAttention, AWrongIntegerIsNamedWithTheOutputItChanges) {
  const PackedBatch batch = two_documents();
  const Metadata want = ref::metadata(batch).value();
  EXPECT_FALSE(attention_difference(batch, want, want));
  Metadata got = want;
  got.ragged_offsets_kv[0] = 0;  // the first document's keys start on the padding token
  const auto difference = attention_difference(batch, got, want);
  ASSERT_TRUE(difference);
  EXPECT_NE(difference->find("o of q token 1 (row 0, token 1), d 0: "), std::string::npos) << *difference;
  EXPECT_NE(difference->find("nan"), std::string::npos) << *difference;
  EXPECT_NE(difference->find("ragged_offsets_kv[0]: backend 0, expected 1"), std::string::npos) << *difference;
}

// Documents [2, 2] in micro-sequences of 2 tokens: micro-sequence 1's
// canonical metadata, over a buffer of 4 tokens.
MicroSequenceMetadata second_of_two_micro_sequences() {
  MicroSequenceMetadata m;
  m.index = 1, m.begin = 2, m.end = 4, m.first_document_begin = 2;
  m.cu_seqlens_q = {0, 2}, m.cu_seqlens_k = {0, 2};
  return m;
}

// A micro-sequence has cu_seqlens_k and first_document_begin, not the batch's
// cu_seqlens_kv and ragged_offsets_kv: its messages name its own fields.
TEST(MetadataThroughAttention, MicroSequenceMessagesNameTheMicroSequenceFields) {
  const MicroSequenceMetadata want = second_of_two_micro_sequences();
  MicroSequenceMetadata got = want;
  got.cu_seqlens_k = {0, 5};  // keys [2, 7) of 4
  auto difference = micro_sequence_attention_difference(4, got, want);
  ASSERT_TRUE(difference);
  EXPECT_NE(difference->find("document 0 reads 5 kv tokens from token 2 (first_document_begin + cu_seqlens_k[0], "
                             "cu_seqlens_k[0..1]) of a tensor of 4"),
            std::string::npos)
      << *difference;
  got.cu_seqlens_k = {0, 1, 2};
  difference = micro_sequence_attention_difference(4, got, want);
  ASSERT_TRUE(difference);
  EXPECT_NE(difference->find("cu_seqlens_q 2, cu_seqlens_k 3 entries"), std::string::npos) << *difference;
  got.cu_seqlens_k = {2, 0};
  difference = micro_sequence_attention_difference(4, got, want);
  ASSERT_TRUE(difference);
  EXPECT_NE(difference->find("cu_seqlens_k[1] = 0 < cu_seqlens_k[0] = 2"), std::string::npos) << *difference;
  EXPECT_EQ(difference->find("_kv"), std::string::npos) << *difference;
}

}  // namespace
}  // namespace attn_oracle
