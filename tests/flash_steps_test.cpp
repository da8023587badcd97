// flash_steps_test.cpp: the backward's element steps of flash_tile.hpp, which the
// CuTe kernels and the CPU twin both call (the twin is judged by the properties; a
// step that drifted from the kernels' arithmetic would be judged nowhere else):
//  - flash_delta sums in the preprocessing kernel's order (8 lanes of 8-element
//    chunks, then a butterfly), not left to right: a case where the two differ;
//  - backward_weight recomputes the softmax from the lse, and a row that attended
//    nothing (lse -inf) gives 0 for any score, never inf - inf.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn_oracle/gpu/attention/flash_tile.hpp"

namespace attn_oracle::gpu {
namespace {

TEST(FlashDelta, SumsInTheLaneOrderOfTheKernel) {
  // Products 2^24 (lane 0), -2^24 (lane 1), 1 (lane 2): left to right the 2^24 cancel
  // first and 1 survives; the butterfly adds 1 to 2^24 first, where it is lost.
  std::vector<float> d_o(64, 0.0f), o(64, 1.0f);
  d_o[0] = 16777216.0f, d_o[8] = -16777216.0f, d_o[16] = 1.0f;
  float left_to_right = 0.0f;
  for (int c = 0; c < 64; ++c) left_to_right += d_o[c] * o[c];
  EXPECT_EQ(left_to_right, 1.0f);
  EXPECT_EQ(flash_delta(d_o.data(), o.data(), 64), 0.0f);
}

TEST(FlashDelta, IsTheDotProductAtEveryHeadDim) {
  for (int d : {64, 128, 256}) {
    std::vector<float> d_o(d), o(d);
    double exact = 0.0;
    for (int c = 0; c < d; ++c) {
      d_o[c] = std::sin(0.37f * c), o[c] = std::cos(0.11f * c + 1.0f);
      exact += double(d_o[c]) * double(o[c]);
    }
    EXPECT_NEAR(flash_delta(d_o.data(), o.data(), d), exact, 1e-5) << "head_dim " << d;
  }
}

TEST(BackwardWeight, IsTheSoftmaxFromTheLse) {
  const float scale = 0.125f, raw = 3.0f, lse = 2.5f;
  EXPECT_NEAR(backward_weight(raw, scale * kLog2e, lse_log2_of(lse)), std::exp(raw * scale - lse), 1e-6);
}

TEST(BackwardWeight, ARowThatAttendedNothingWeighsZero) {
  const float lse2 = lse_log2_of(-INFINITY);
  for (float raw : {0.0f, -1e30f, 1e30f, 7.0f}) {
    EXPECT_EQ(backward_weight(raw, 0.125f * kLog2e, lse2), 0.0f) << raw;
    EXPECT_EQ(score_grad(backward_weight(raw, 0.125f * kLog2e, lse2), 5.0f, 2.0f), 0.0f) << raw;
  }
}

}  // namespace
}  // namespace attn_oracle::gpu
