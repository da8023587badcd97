// cudnn_backend_rules_test.cpp: the host-side rules of the `cudnn` backend, which
// run without cuDNN or a device:
//  - the band (cudnn_band.hpp): cuDNN's documented rule with the converted bounds
//    keeps exactly the pairs the kernels' index rule (gpu::index_allowed) keeps, for
//    every mask kind, windows from -1 to 5 on both sides, and runs up to 9 x 9
//    (the left bound's exclusive boundary is the classic off-by-one here);
//  - the plan (cudnn_plan.hpp): bshd only for one document per row at its start,
//    element offsets, lse from packed stats with -inf for tokens of no document;
//  - the support rules (cudnn_support.hpp): each declines with a reason naming the
//    value, and a Hopper with cuDNN 9.19 takes bf16 D=128 GQA thd with a window.
#include <gtest/gtest.h>

#include <cmath>

#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "cudnn_band.hpp"
#include "cudnn_plan.hpp"
#include "cudnn_support.hpp"

namespace attn_oracle {
namespace {

TEST(CudnnBand, MatchesTheKernelIndexRuleEverywhere) {
  for (MaskKind mask : kAllMaskKinds)
    for (int64_t left = -1; left <= 5; ++left)
      for (int64_t right = -1; right <= 5; ++right) {
        const cudnn::Band band = cudnn::band_for(mask, Window{left, right});
        for (int64_t lq = 1; lq <= 9; ++lq)
          for (int64_t lkv = 1; lkv <= 9; ++lkv)
            for (int64_t a = 0; a < lq; ++a)
              for (int64_t b = 0; b < lkv; ++b)
                ASSERT_EQ(cudnn::cudnn_band_keeps(band, a, b, lq, lkv),
                          gpu::index_allowed(static_cast<int>(mask), left, right, a, b, lq, lkv))
                    << to_string(mask) << " window (" << left << ", " << right << ") lq " << lq << " lkv " << lkv
                    << " query " << a << " key " << b;
      }
}

TEST(CudnnBand, LeftWindowIsOneMoreThanDesignsAndCausalIsRightBoundZero) {
  const cudnn::Band w = cudnn::band_for(MaskKind::padding, Window{0, 3});
  EXPECT_EQ(w.left_bound, 1);  // our left 0: the diagonal alone
  EXPECT_EQ(w.right_bound, 3);
  EXPECT_FALSE(w.bottom_right);
  const cudnn::Band br = cudnn::band_for(MaskKind::causal_bottom_right, Window{2, 7});
  EXPECT_TRUE(br.bottom_right);
  EXPECT_EQ(br.right_bound, 0);  // the window's right side is ignored (docs/semantics.md#2-the-attention-mask)
  EXPECT_EQ(br.left_bound, 3);
  const cudnn::Band none = cudnn::band_for(MaskKind::no_mask, Window{});
  EXPECT_FALSE(none.left_bound.has_value());
  EXPECT_FALSE(none.right_bound.has_value());
}

// ids rows -> a self-attention batch, positions 0.. per document.
PackedBatch batch_of(const std::vector<std::vector<int64_t>>& rows, MaskKind mask) {
  PackedBatch batch;
  batch.mask = mask;
  batch.max_segments = 4;
  const int64_t t = static_cast<int64_t>(rows[0].size());
  batch.q.segment_ids = IntArray::filled({static_cast<int64_t>(rows.size()), t}, 0);
  batch.q.segment_pos = IntArray::filled({static_cast<int64_t>(rows.size()), t}, 0);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t i = 0, pos = 0; i < t; ++i) {
      const int64_t id = rows[r][i];
      pos = i > 0 && rows[r][i - 1] == id ? pos + 1 : 0;
      batch.q.segment_ids.data[r * t + i] = id;
      batch.q.segment_pos.data[r * t + i] = pos;
    }
  batch.kv = batch.q;
  return batch;
}

cudnn::Plan plan_of(const PackedBatch& batch) {
  const Expected<Metadata> md = gpu::metadata_twin(batch);
  EXPECT_TRUE(md.ok()) << md.error().message;
  const int64_t t = batch.q.segment_ids.shape.back();
  return cudnn::make_plan(md.value(), batch.q.segment_ids.shape[0], t, t);
}

TEST(CudnnPlan, OneDocumentPerRowAtItsStartIsBshd) {
  const cudnn::Plan plan = plan_of(batch_of({{1, 1, 1, 0}, {1, 1, 0, 0}}, MaskKind::padding_causal));
  EXPECT_EQ(plan.layout, cudnn::Layout::bshd);
  EXPECT_EQ(plan.docs, 2);
  EXPECT_EQ(plan.s_max_q, 4);  // the row length: BSHD strides
  EXPECT_EQ(plan.seq_len_q, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(plan.token_offset_q, (std::vector<int64_t>{0, 4, 8}));
}

TEST(CudnnPlan, PackedRowsAreThdWithElementOffsets) {
  const cudnn::Plan plan = plan_of(batch_of({{0, 1, 1, 2, 2, 2}, {1, 0, 0, 0, 0, 0}}, MaskKind::padding));
  EXPECT_EQ(plan.layout, cudnn::Layout::thd);
  EXPECT_EQ(plan.docs, 3);
  EXPECT_EQ(plan.s_max_q, 64);  // rounded up, so that similar problems share a graph
  EXPECT_EQ(plan.seq_len_q, (std::vector<int32_t>{2, 3, 1}));
  EXPECT_EQ(plan.token_offset_q, (std::vector<int64_t>{1, 3, 6, 12}));
  EXPECT_EQ(cudnn::element_offsets(plan.token_offset_q, 2, 8), (std::vector<int64_t>{16, 48, 96, 192}));
}

TEST(CudnnPlan, LseComesFromPackedStatsAndIsMinusInfinityElsewhere) {
  const cudnn::Plan plan = plan_of(batch_of({{0, 1, 1, 2}}, MaskKind::padding));
  ASSERT_EQ(plan.docs, 2);
  const int64_t heads = 2;
  std::vector<float> stats(static_cast<size_t>(plan.docs * heads * plan.s_max_q), NAN);
  auto at = [&](int64_t s, int64_t h, int64_t i) -> float& { return stats[(s * heads + h) * plan.s_max_q + i]; };
  at(0, 0, 0) = 1, at(0, 0, 1) = 2, at(0, 1, 0) = 3, at(0, 1, 1) = 4, at(1, 0, 0) = 5, at(1, 1, 0) = 6;
  const std::vector<float> lse = cudnn::lse_from_stats(plan, heads, stats);
  const float inf = INFINITY;
  EXPECT_EQ(lse, (std::vector<float>{-inf, 1, 2, 5, -inf, 3, 4, 6}));
}

cudnn::Platform hopper(int64_t version) { return cudnn::Platform{version, 9, 0, "test"}; }

TEST(CudnnSupport, HopperWithCudnn919TakesGqaThdWithAWindow) {
  const AttentionShape shape{8, 2, 128, std::nullopt, Dtype::bf16, true};
  const cudnn::Band band = cudnn::band_for(MaskKind::padding_causal_bottom_right, Window{16, -1});
  EXPECT_EQ(cudnn::unsupported(hopper(91900), shape, band, cudnn::Layout::thd), std::nullopt);
}

TEST(CudnnSupport, EachLimitDeclinesWithAReason) {
  const cudnn::Band plain = cudnn::band_for(MaskKind::padding, Window{});
  auto reason = [&](const cudnn::Platform& p, AttentionShape shape, cudnn::Band band, cudnn::Layout layout) {
    return cudnn::unsupported(p, shape, band, layout).value_or("");
  };
  const AttentionShape bf16{4, 4, 64, std::nullopt, Dtype::bf16, false};
  EXPECT_NE(reason(hopper(91900), {4, 4, 64, std::nullopt, Dtype::fp32, false}, plain, cudnn::Layout::bshd).find("fp32"), std::string::npos);
  EXPECT_NE(reason(hopper(91900), {4, 4, 60, std::nullopt, Dtype::bf16, false}, plain, cudnn::Layout::bshd).find("head_dim 60"), std::string::npos);
  EXPECT_NE(reason(hopper(91900), {4, 4, 512, std::nullopt, Dtype::bf16, false}, plain, cudnn::Layout::bshd).find("at most 256"), std::string::npos);
  EXPECT_NE(reason(cudnn::Platform{91900, 8, 0, "a100"}, bf16, plain, cudnn::Layout::thd).find("ragged"), std::string::npos);
  EXPECT_EQ(reason(cudnn::Platform{91900, 8, 0, "a100"}, bf16, plain, cudnn::Layout::bshd), "");
  EXPECT_NE(reason(hopper(90500), {4, 2, 64, std::nullopt, Dtype::bf16, false}, plain, cudnn::Layout::thd).find("GQA"), std::string::npos);
  EXPECT_NE(reason(hopper(91000), {4, 4, 64, std::nullopt, Dtype::bf16, true}, plain, cudnn::Layout::bshd).find("9.10.0"), std::string::npos);
  EXPECT_NE(reason(hopper(91001), bf16, cudnn::band_for(MaskKind::padding, Window{3, -1}), cudnn::Layout::bshd).find("9.10.2"), std::string::npos);
  EXPECT_NE(reason(hopper(80900), bf16, plain, cudnn::Layout::bshd).find("cuDNN 9"), std::string::npos);
  EXPECT_EQ(cudnn::version_string(91900), "9.19.0");
}

}  // namespace
}  // namespace attn_oracle
