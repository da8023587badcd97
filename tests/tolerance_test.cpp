// tolerance_test.cpp: meta tests of the tolerance rule (tolerance.hpp).
//
// The rule must accept a known-good pair (the float64 reference rounded to bf16,
// which is what a perfect bf16 device would return), reject a known-bad one (one
// element off by 0.1) at the right index, demand that infinities match exactly,
// and fail on any NaN. The same-precision naive computation must be close to
// the reference and keep its masked rows at 0 / -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Two rows of documents with padding and a q token outside every document, so
// that lse has -inf entries; GQA and backward on.
AttentionProblem padded_problem(Dtype dtype) {
  const std::vector<int64_t> q = {1, 1, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 1, 1, 0, 0};
  const std::vector<int64_t> q_pos = {0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5, 0, 0};
  const std::vector<int64_t> kv = {1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0};
  const std::vector<int64_t> kv_pos = {0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0};
  PackedBatch b;
  b.q = PackedSide{IntArray({2, 8}, q), IntArray({2, 8}, q_pos)};
  b.kv = PackedSide{IntArray({2, 8}, kv), IntArray({2, 8}, kv_pos)};
  b.mask = MaskKind::padding_causal_bottom_right;
  b.max_segments = 2;
  AttentionShape s;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 8;
  s.dtype = dtype;
  s.backward = true;
  return AttentionProblem{b, s};
}

std::vector<double> rounded(const std::vector<double>& t, Dtype dtype) {
  std::vector<double> out(t.size());
  for (size_t i = 0; i < t.size(); ++i) out[i] = round_to_dtype(t[i], dtype);
  return out;
}

// What a perfect device would return: the float64 result stored in the dtype.
AttentionResult stored(const AttentionResult& r, Dtype dtype) {
  AttentionResult out{rounded(r.o, dtype), rounded(r.lse, Dtype::fp32), std::nullopt};
  if (r.grads)
    out.grads = AttentionGradients{rounded(r.grads->dq, dtype), rounded(r.grads->dk, dtype),
                                   rounded(r.grads->dv, dtype)};
  return out;
}

struct Fixture {
  AttentionProblem problem;
  AttentionInputs inputs;
  AttentionResult reference;
};

Fixture make_fixture(Dtype dtype) {
  Fixture f{padded_problem(dtype), {}, {}};
  f.inputs = generate_inputs(f.problem, 2024);
  auto r = ref::attention_dense_masked(f.problem, f.inputs);
  EXPECT_TRUE(r.ok());
  f.reference = r.value();
  return f;
}

TEST(Tolerance, KnownGoodPairPasses) {
  for (Dtype dtype : {Dtype::bf16, Dtype::fp16, Dtype::fp32}) {
    const Fixture f = make_fixture(dtype);
    const auto checks = check_attention_tolerance(f.problem, f.inputs,
                                                  stored(f.reference, dtype), f.reference);
    ASSERT_EQ(checks.size(), 5u);
    for (const ToleranceCheck& c : checks) EXPECT_TRUE(c.pass) << c.describe();
    EXPECT_EQ(checks[1].tensor, "lse");
  }
}

TEST(Tolerance, KnownBadPairFailsAtTheWorstElement) {
  const Fixture f = make_fixture(Dtype::bf16);
  AttentionResult bad = stored(f.reference, Dtype::bf16);
  bad.o[37] += 0.1;
  bad.grads->dk[5] -= 0.1;
  const auto checks = check_attention_tolerance(f.problem, f.inputs, bad, f.reference);
  ASSERT_EQ(checks.size(), 5u);
  const ToleranceCheck& o = checks[0];
  EXPECT_FALSE(o.pass) << o.describe();
  EXPECT_EQ(o.tensor, "o");
  EXPECT_EQ(o.worst_index, 37);
  EXPECT_EQ(o.backend_value, bad.o[37]);
  EXPECT_EQ(o.reference_value, f.reference.o[37]);
  EXPECT_GT(o.ratio, 1.0);
  EXPECT_NEAR(o.error, 0.1, 0.01);
  EXPECT_NE(o.describe().find("worst element 37"), std::string::npos) << o.describe();
  EXPECT_TRUE(checks[1].pass) << checks[1].describe();
  EXPECT_TRUE(checks[2].pass) << checks[2].describe();
  EXPECT_FALSE(checks[3].pass);
  EXPECT_EQ(checks[3].worst_index, 5);
  EXPECT_TRUE(checks[4].pass) << checks[4].describe();
}

TEST(Tolerance, InfinitiesMustMatchAndNaNFails) {
  const std::vector<double> ref = {0.5, -kInf, 1.0};
  const std::vector<double> naive = {0.5, -kInf, 1.0};
  EXPECT_TRUE(check_tolerance("lse", {0.5, -kInf, 1.0}, ref, naive, 2, Dtype::fp32).pass);
  const ToleranceCheck finite = check_tolerance("lse", {0.5, -50.0, 1.0}, ref, naive, 2,
                                                Dtype::fp32);
  EXPECT_FALSE(finite.pass);
  EXPECT_EQ(finite.worst_index, 1);
  EXPECT_FALSE(check_tolerance("lse", {0.5, kInf, 1.0}, ref, naive, 2, Dtype::fp32).pass);
  const ToleranceCheck nan = check_tolerance("o", {0.5, -kInf, std::nan("")}, ref, naive, 2,
                                             Dtype::bf16);
  EXPECT_FALSE(nan.pass);
  EXPECT_EQ(nan.worst_index, 2);
  EXPECT_NE(nan.describe().find("NaN"), std::string::npos) << nan.describe();
  const ToleranceCheck sizes = check_tolerance("o", {0.5}, ref, naive, 2, Dtype::bf16);
  EXPECT_FALSE(sizes.pass);
  EXPECT_NE(sizes.detail.find("sizes"), std::string::npos);
}

TEST(Tolerance, BudgetIsKTimesNaiveErrorPlusFloor) {
  const ToleranceCheck c =
      check_tolerance("dq", {1.0, 2.07}, {1.0, 2.0}, {1.0, 2.02}, 3, Dtype::fp16);
  EXPECT_NEAR(c.naive_error, 0.02, 1e-12);
  EXPECT_NEAR(c.budget, 3 * 0.02 + tolerance_floor(Dtype::fp16), 1e-12);
  EXPECT_FALSE(c.pass);  // 0.07 > 0.061
  EXPECT_TRUE(check_tolerance("dq", {1.0, 2.06}, {1.0, 2.0}, {1.0, 2.02}, 3, Dtype::fp16).pass);
}

TEST(Tolerance, MissingGradientsFail) {
  const Fixture f = make_fixture(Dtype::bf16);
  AttentionResult no_grads = stored(f.reference, Dtype::bf16);
  no_grads.grads.reset();
  const auto checks = check_attention_tolerance(f.problem, f.inputs, no_grads, f.reference);
  ASSERT_EQ(checks.size(), 5u);
  EXPECT_FALSE(checks[2].pass);
  EXPECT_FALSE(checks[2].detail.empty());
}

TEST(NaiveSamePrecision, TracksTheReferenceAndKeepsMaskedRowsEmpty) {
  for (auto [dtype, bound] : {std::pair{Dtype::fp32, 1e-5}, std::pair{Dtype::bf16, 0.05}}) {
    const Fixture f = make_fixture(dtype);
    const AttentionResult n = naive_same_precision(f.problem, f.inputs);
    ASSERT_EQ(n.o.size(), f.reference.o.size());
    ASSERT_TRUE(n.grads.has_value());
    for (size_t i = 0; i < n.lse.size(); ++i) {
      if (std::isinf(f.reference.lse[i])) {
        EXPECT_EQ(n.lse[i], f.reference.lse[i]) << i;
        continue;
      }
      EXPECT_NEAR(n.lse[i], f.reference.lse[i], 1e-5) << i;
    }
    for (size_t i = 0; i < n.o.size(); ++i) EXPECT_NEAR(n.o[i], f.reference.o[i], bound) << i;
    for (size_t i = 0; i < n.grads->dk.size(); ++i)
      EXPECT_NEAR(n.grads->dk[i], f.reference.grads->dk[i], bound) << i;
    // The error it measures is real for bf16 (else the budget would be the floor only).
    if (dtype == Dtype::bf16) {
      EXPECT_GT(check_tolerance("o", n.o, f.reference.o, n.o, 2, dtype).error, 1e-4);
    }
  }
}

}  // namespace
}  // namespace attn_oracle
