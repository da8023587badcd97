// metadata_twin_test.cpp: hand cases for the O(T) metadata twin at the edges its
// properties reach rarely (ids above M that reappear, empty rows, T = 0, extra
// dims addressed by strides, runs that meet at a segment boundary), the stream
// cursor the token kernels step, the order of their error keys, and the kernels
// against the twin, integer for integer, when a device is present (skipped otherwise).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/metadata_tokens.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace attn_oracle {
namespace {

PackedBatch one_row(std::vector<int64_t> q_ids, std::vector<int64_t> kv_ids, MaskKind mask, int64_t M) {
  auto side = [](std::vector<int64_t> ids) {
    const int64_t n = ids.size();
    std::vector<int64_t> pos(n);
    for (int64_t t = 0; t < n; ++t) pos[t] = t;
    return PackedSide{IntArray({1, n}, ids), IntArray({1, n}, pos)};
  };
  PackedBatch b;
  b.q = side(std::move(q_ids));
  b.kv = side(std::move(kv_ids));
  b.mask = mask;
  b.max_segments = M;
  return b;
}

ErrorCode twin_code(const PackedBatch& b) {
  auto md = gpu::metadata_twin(b);
  EXPECT_FALSE(md.ok());
  return md.ok() ? ErrorCode::unsupported : md.error().code;
}

TEST(MetadataTwin, IdAboveMThatReappearsIsNoncontiguous) {
  // 7 > M = 2 both times; reappearing outranks too_many_segments.
  EXPECT_EQ(twin_code(one_row({7, 0, 7}, {1, 1, 1}, MaskKind::padding, 2)), ErrorCode::noncontiguous_segment);
  EXPECT_EQ(twin_code(one_row({7, 0, 8}, {1, 1, 1}, MaskKind::padding, 2)), ErrorCode::too_many_segments);
}

TEST(MetadataTwin, PrecedenceIsByCodeAcrossTheRow) {
  // The out-of-order document comes first, the reappearance later: noncontiguous wins.
  EXPECT_EQ(twin_code(one_row({3, 1, 3}, {1, 1, 1}, MaskKind::padding, 3)), ErrorCode::noncontiguous_segment);
  EXPECT_EQ(twin_code(one_row({2, 1}, {1, 1}, MaskKind::padding, 2)), ErrorCode::ids_out_of_order);
  EXPECT_EQ(twin_code(one_row({0, 1}, {1, 1}, MaskKind::causal, 2)), ErrorCode::padding_with_non_padding_mask);
}

TEST(MetadataTwin, EmptyRowsAndZeroLengthMatchTheReference) {
  for (const PackedBatch& b : {one_row({0, 0}, {1, 1}, MaskKind::padding, 1), one_row({}, {}, MaskKind::padding, 2),
                               one_row({1, 1}, {}, MaskKind::padding_causal, 1)}) {
    auto twin = gpu::metadata_twin(b);
    ASSERT_TRUE(twin.ok()) << twin.error().message;
    EXPECT_EQ(twin.value(), ref::metadata(b).value());
  }
}

TEST(MetadataTwin, ErrorNamesSideRowTokenAndValues) {
  auto md = gpu::metadata_twin(one_row({1, 1}, {1, 3}, MaskKind::padding, 2));
  ASSERT_FALSE(md.ok());
  EXPECT_EQ(md.error().code, ErrorCode::too_many_segments);
  EXPECT_NE(md.error().message.find("kv side, row 0, token 1"), std::string::npos) << md.error().message;
  EXPECT_NE(md.error().message.find("id 3 exceeds max_segments 2"), std::string::npos) << md.error().message;
}

TEST(MetadataTwin, TrimsBottomRightByBinarySearch) {
  // docs/semantics.md#10-worked-examples, example ex8: q 4 tokens against kv 2, bottom-right: q
  // tokens 2, 3 survive.
  auto md = gpu::metadata_twin(one_row({1, 1, 1, 1}, {1, 1}, MaskKind::causal_bottom_right, 1));
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->q_seqlens, std::vector<int64_t>({2}));
  EXPECT_EQ(md->q_offsets, std::vector<int64_t>({2, -1}));
  EXPECT_EQ(md->kv_seqlens, std::vector<int64_t>({2}));
}

TEST(MetadataTwin, OrderIsJudgedAcrossPaddingButNotAcrossSegments) {
  auto md = gpu::metadata_twin(one_row({2, 0, 1}, {1, 1, 1}, MaskKind::padding, 2));
  ASSERT_FALSE(md.ok());
  EXPECT_EQ(md.error().code, ErrorCode::ids_out_of_order);
  EXPECT_NE(md.error().message.find("document id 1 follows document id 2"), std::string::npos) << md.error().message;
  // q's last run (id 3) is not the previous run of kv's first (id 1): another segment.
  auto ok = gpu::metadata_twin(one_row({1, 1, 3}, {1, 2, 3}, MaskKind::padding, 3));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
}

TEST(MetadataTwin, StreamCursorStepsLikeDivision) {
  for (int64_t row_tokens : {1, 2, 3, 255, 256, 257, 1000, 4096})
    for (int64_t step : {1, 7, 256, 2048})
      for (int64_t start : {0, 1, 5, 300, 5000}) {
        gpu::StreamCursor c = gpu::cursor_at(start, row_tokens);
        for (int64_t g = start; g < start + 40 * step; g += step, gpu::advance(c, step, row_tokens)) {
          const gpu::StreamCursor want = gpu::cursor_at(g, row_tokens);
          ASSERT_EQ(c.row, want.row) << "row_tokens " << row_tokens << ", step " << step << ", g " << g;
          ASSERT_EQ(c.within, want.within) << "row_tokens " << row_tokens << ", step " << step << ", g " << g;
        }
      }
}

TEST(MetadataTwin, ErrorKeysOrderSideThenCodeThenToken) {
  using gpu::error_key;
  EXPECT_LT(error_key(0, gpu::kNegativePosition, 1000), error_key(1, gpu::kNegativeId, 0));
  EXPECT_LT(error_key(1, gpu::kNegativeId, 1000), error_key(1, gpu::kNoncontiguous, 0));
  EXPECT_LT(error_key(1, gpu::kNoncontiguous, 3), error_key(1, gpu::kNoncontiguous, 4));
  const uint64_t key = error_key(1, gpu::kPositionsNotIncreasing, (int64_t{1} << 40) + 3);
  EXPECT_EQ(gpu::key_side(key), 1);
  EXPECT_EQ(gpu::key_code(key), gpu::kPositionsNotIncreasing);
  EXPECT_EQ(gpu::key_token(key), (int64_t{1} << 40) + 3);
}

// ------------------------------------------------------------ CUDA vs twin
class CudaMatchesTwin : public testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::cuda_available())
      GTEST_SKIP() << "no CUDA device here: the kernels' steps are checked through the CPU twin";
  }
};

void expect_same(Backend&, const Case& c, CheckRecord&) {
  const PackedBatch& b = c.as<MetadataCase>()->batch;
  const auto twin = gpu::metadata_twin(b), cuda = gpu::metadata_cuda(b);
  require(twin.ok() == cuda.ok(), "the twin and the kernel disagree on accepting the input");
  if (twin.ok()) require(twin.value() == cuda.value(), "the twin's and the kernel's metadata differ");
  else
    require(twin.error().code == cuda.error().code && twin.error().message == cuda.error().message,
            "the twin and the kernel give different errors: " + twin.error().message + " vs " + cuda.error().message);
}

TEST_F(CudaMatchesTwin, OnTenThousandStructuredAndArbitraryInputs) {
  RunSettings settings = default_run_settings();
  settings.cases = 5000;
  const auto reference = make_reference_backend();
  for (auto gen : {packed_batch(), arbitrary_batch()}) {
    const PropertyDef twin_equals_kernel{"metadata/cudaEqualsTwin", Capability::metadata, "the kernels equal the twin",
                                         [gen](const DrawContext&) { return Case{MetadataCase{*gen}, {}, {}, {}}; },
                                         expect_same};
    const PropertyOutcome o = run_property(twin_equals_kernel, *reference, settings);
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << (o.failures.empty() ? o.message : o.failures[0].message);
  }
}

}  // namespace
}  // namespace attn_oracle
