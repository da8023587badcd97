// reference_attention_test.cpp: the float64 attention reference (attention.hpp).
//
// Hand-computed cases (one key, uniform keys, scale, fully masked queries,
// padding kv tokens, GQA against repeated kv heads), exact dtype rounding,
// error codes, the seeded generator, dense == per-document on representable
// batches (cross-attention, bottom-right with q longer than kv, windows, extra
// dims), and both backwards against central finite differences of sum(O * dO).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Ids = std::vector<int64_t>;
using Formulation = Expected<AttentionResult> (*)(const AttentionProblem&,
                                                  const AttentionInputs&);

// Positions 0, 1, ... inside each document, 0 on padding.
Ids positions(const Ids& ids) {
  Ids pos(ids.size(), 0);
  for (size_t t = 1; t < ids.size(); ++t)
    if (ids[t] != 0 && ids[t] == ids[t - 1]) pos[t] = pos[t - 1] + 1;
  return pos;
}

// One side from B rows of equal length, positions per document from 0.
PackedSide side(const std::vector<Ids>& rows) {
  Ids ids, pos;
  for (const Ids& r : rows) {
    ids.insert(ids.end(), r.begin(), r.end());
    const Ids p = positions(r);
    pos.insert(pos.end(), p.begin(), p.end());
  }
  const Shape shape{int64_t(rows.size()), int64_t(rows[0].size())};
  return PackedSide{IntArray(shape, ids), IntArray(shape, pos)};
}

PackedBatch batch(const std::vector<Ids>& q, const std::vector<Ids>& kv, MaskKind mask,
                  int64_t max_segments, Window window = {}) {
  return PackedBatch{side(q), side(kv), mask, window, max_segments};
}

AttentionProblem problem(PackedBatch b, int64_t hq, int64_t hkv, int64_t dim, bool backward,
                         std::optional<double> scale = std::nullopt) {
  return AttentionProblem{std::move(b), AttentionShape{hq, hkv, dim, scale, Dtype::fp32, backward}};
}

AttentionResult run(Formulation f, const AttentionProblem& p, const AttentionInputs& in) {
  auto r = f(p, in);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : AttentionResult{};
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b,
                  const std::string& what, double rel = 1e-12) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i]) || std::isnan(b[i])) << what << " NaN at " << i;
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << what << " at " << i;
      continue;
    }
    EXPECT_LE(std::fabs(a[i] - b[i]), rel * std::max(1.0, std::fabs(b[i])))
        << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

void expect_same_result(const AttentionResult& a, const AttentionResult& b) {
  expect_close(a.o, b.o, "o");
  expect_close(a.lse, b.lse, "lse");
  ASSERT_EQ(a.grads.has_value(), b.grads.has_value());
  if (!a.grads) return;
  expect_close(a.grads->dq, b.grads->dq, "dq");
  expect_close(a.grads->dk, b.grads->dk, "dk");
  expect_close(a.grads->dv, b.grads->dv, "dv");
}

// ---------------------------------------------------------------------------
// Dtypes, scale, generator, errors
// ---------------------------------------------------------------------------

TEST(Dtype, NamesRoundTrip) {
  for (Dtype d : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    EXPECT_EQ(dtype_from_string(to_string(d)), d);
  EXPECT_EQ(to_string(Dtype::bf16), "bf16");
  EXPECT_FALSE(dtype_from_string("fp64").has_value());
}

TEST(Dtype, RoundsToNearestEvenWithSubnormalsAndOverflow) {
  const double p = std::ldexp(1.0, -8);
  EXPECT_EQ(round_to_dtype(1.0 + p, Dtype::bf16), 1.0);  // tie, 1 is even
  EXPECT_EQ(round_to_dtype(1.0 + 3 * p, Dtype::bf16), 1.0 + 4 * p);  // tie, up to even
  // No double rounding through float: just above the tie goes up.
  EXPECT_EQ(round_to_dtype(1.0 + p + std::ldexp(1.0, -30), Dtype::bf16), 1.0 + 2 * p);
  EXPECT_EQ(round_to_dtype(1.0 / 3.0, Dtype::bf16), 0.333984375);
  EXPECT_EQ(round_to_dtype(1.0 / 3.0, Dtype::fp16), 0.333251953125);
  EXPECT_EQ(round_to_dtype(1.0 / 3.0, Dtype::fp32), double(float(1.0 / 3.0)));
  EXPECT_EQ(round_to_dtype(65504.0, Dtype::fp16), 65504.0);
  EXPECT_EQ(round_to_dtype(65519.0, Dtype::fp16), 65504.0);
  EXPECT_EQ(round_to_dtype(65520.0, Dtype::fp16), kInf);  // tie rounds to 2^16: overflow
  EXPECT_EQ(round_to_dtype(-1e6, Dtype::fp16), -kInf);
  EXPECT_EQ(round_to_dtype(1e39, Dtype::bf16), kInf);
  EXPECT_EQ(round_to_dtype(1e39, Dtype::fp32), kInf);
  const double tiny = std::ldexp(1.0, -24);  // fp16's smallest subnormal
  EXPECT_EQ(round_to_dtype(tiny, Dtype::fp16), tiny);
  EXPECT_EQ(round_to_dtype(tiny / 2, Dtype::fp16), 0.0);            // tie to even 0
  EXPECT_EQ(round_to_dtype(tiny * 0.75, Dtype::fp16), tiny);
  EXPECT_EQ(round_to_dtype(tiny * 1.5, Dtype::fp16), 2 * tiny);     // tie to even 2^-23
  EXPECT_EQ(round_to_dtype(std::ldexp(1.0, -133), Dtype::bf16), std::ldexp(1.0, -133));
  EXPECT_EQ(round_to_dtype(-0.0, Dtype::bf16), 0.0);
  EXPECT_TRUE(std::isnan(round_to_dtype(std::nan(""), Dtype::fp16)));
}

TEST(AttentionShape, DefaultScaleIsInverseSqrtHeadDim) {
  AttentionShape s;
  s.head_dim = 16;
  EXPECT_DOUBLE_EQ(s.effective_scale(), 0.25);
  s.scale = 0.7;
  EXPECT_EQ(s.effective_scale(), 0.7);
}

TEST(GenerateInputs, IsTheDocumentedSplitMix64Stream) {
  const auto p = problem(batch({{1, 1, 0}}, {{1, 1}}, MaskKind::padding, 1), 2, 1, 4, true);
  const AttentionInputs in = generate_inputs(p, 0);
  ASSERT_EQ(in.q.size(), 3u * 2 * 4);
  ASSERT_EQ(in.k.size(), 2u * 1 * 4);
  ASSERT_EQ(in.v.size(), in.k.size());
  ASSERT_EQ(in.d_o.size(), in.q.size());
  // splitmix64 from seed 0 first returns 0xe220a8397b1dcdaf.
  const double first = double(0xe220a8397b1dcdafULL >> 11) * std::ldexp(1.0, -53) * 2 - 1;
  EXPECT_EQ(in.q[0], double(float(first)));
  EXPECT_EQ(generate_inputs(p, 0), in);
  EXPECT_NE(generate_inputs(p, 1).q, in.q);
  auto half = p;
  half.shape.dtype = Dtype::bf16;
  for (double x : generate_inputs(half, 7).v) {
    EXPECT_EQ(round_to_dtype(x, Dtype::bf16), x);
    EXPECT_TRUE(x >= -1.0 && x <= 1.0);
  }
}

TEST(ValidateAttention, RejectsBadHeadsAndTensorShapes) {
  auto p = problem(batch({{1, 1}}, {{1, 1, 1}}, MaskKind::padding, 1), 3, 2, 4, false);
  auto e = validate_attention(p);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::bad_heads);
  EXPECT_NE(e.error().message.find("heads_q = 3"), std::string::npos) << e.error().message;
  p.shape.heads_q = 2;
  p.shape.head_dim = 0;
  EXPECT_EQ(validate_attention(p).error().code, ErrorCode::bad_heads);

  p.shape.heads_kv = 1;
  p.shape.head_dim = 4;
  AttentionInputs in = generate_inputs(p, 3);
  ASSERT_TRUE(validate_attention(p, &in).ok());
  EXPECT_EQ(validate_attention(p)->kv_elems(), 3 * 1 * 4);
  in.k.pop_back();
  e = validate_attention(p, &in);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::bad_tensor_shape);
  EXPECT_NE(e.error().message.find("k has 11 elements, expected 12"), std::string::npos)
      << e.error().message;
  EXPECT_EQ(ref::attention_dense_masked(p, in).error().code, ErrorCode::bad_tensor_shape);
  EXPECT_EQ(ref::attention_per_document(p, in).error().code, ErrorCode::bad_tensor_shape);

  in = generate_inputs(p, 3);
  in.d_o = in.q;  // d_o without backward
  EXPECT_EQ(validate_attention(p, &in).error().code, ErrorCode::bad_tensor_shape);
  p.shape.backward = true;
  in.d_o.clear();  // backward without d_o
  EXPECT_EQ(validate_attention(p, &in).error().code, ErrorCode::bad_tensor_shape);
}

TEST(ValidateAttention, BatchErrorsPassThroughFirst) {
  // Row error (id 2 > M = 1) and bad heads: the batch error wins, unchanged.
  auto p = problem(batch({{1, 2}}, {{1, 1}}, MaskKind::padding, 1), 3, 2, 4, false);
  auto e = validate_attention(p);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::too_many_segments);
  const AttentionInputs in = generate_inputs(p, 1);  // sized from shapes, heads are bad
  EXPECT_TRUE(in.q.empty());
  EXPECT_EQ(ref::attention_per_document(p, in).error().code, ErrorCode::too_many_segments);
}

// ---------------------------------------------------------------------------
// Hand-computed forward and backward
// ---------------------------------------------------------------------------

TEST(ReferenceAttention, OneQueryOneKeyCopiesV) {
  const auto p = problem(batch({{1}}, {{1}}, MaskKind::padding, 1), 1, 1, 2, false);
  const AttentionInputs in{{1.0, 2.0}, {0.5, -1.0}, {3.0, 4.0}, {}};
  for (Formulation f : {&ref::attention_dense_masked, &ref::attention_per_document}) {
    const AttentionResult r = run(f, p, in);
    EXPECT_EQ(r.o, (std::vector<double>{3.0, 4.0}));
    EXPECT_DOUBLE_EQ(r.lse[0], (0.5 - 2.0) / std::sqrt(2.0));
  }
}

TEST(ReferenceAttention, EqualScoresAverageAndExplicitScaleIsHonoured) {
  auto p = problem(batch({{1}}, {{1, 1}}, MaskKind::padding, 1), 1, 1, 1, false);
  const AttentionInputs equal{{0.0}, {1.0, -2.0}, {2.0, 6.0}, {}};
  AttentionResult r = run(&ref::attention_dense_masked, p, equal);
  EXPECT_DOUBLE_EQ(r.o[0], 4.0);
  EXPECT_DOUBLE_EQ(r.lse[0], std::log(2.0));
  p.shape.scale = 0.3;  // scores 0.3 * 2 * {1, -2} = {0.6, -1.2}
  const AttentionInputs in{{2.0}, {1.0, -2.0}, {2.0, 6.0}, {}};
  const double w0 = std::exp(0.6), w1 = std::exp(-1.2);
  for (Formulation f : {&ref::attention_dense_masked, &ref::attention_per_document}) {
    r = run(f, p, in);
    EXPECT_NEAR(r.o[0], (2.0 * w0 + 6.0 * w1) / (w0 + w1), 1e-14);
    EXPECT_NEAR(r.lse[0], std::log(w0 + w1), 1e-14);
  }
}

TEST(ReferenceAttention, FullyMaskedQueryAndUnattendedKvAreZero) {
  // q token 1 is padding; kv token 2 is padding; kv token 3 is document 2 that no q has.
  const auto p = problem(batch({{1, 0}}, {{1, 1, 0, 2}}, MaskKind::padding, 2), 2, 1, 3, true);
  const AttentionInputs in = generate_inputs(p, 11);
  for (Formulation f : {&ref::attention_dense_masked, &ref::attention_per_document}) {
    const AttentionResult r = run(f, p, in);
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(r.lse[h * 2 + 1], -kInf);
      EXPECT_TRUE(std::isfinite(r.lse[h * 2]));
    }
    for (int64_t c = 6; c < 12; ++c) {  // q token 1, both heads
      EXPECT_EQ(r.o[c], 0.0);
      EXPECT_EQ(r.grads->dq[c], 0.0);
    }
    for (int64_t c = 6; c < 12; ++c) {  // kv tokens 2 and 3
      EXPECT_EQ(r.grads->dk[c], 0.0);
      EXPECT_EQ(r.grads->dv[c], 0.0);
    }
    EXPECT_NE(r.grads->dv[0], 0.0);
  }
}

TEST(ReferenceAttention, GqaReadsKvHeadHOverGroup) {
  const auto p = problem(batch({{1, 1, 2, 0}}, {{1, 2, 2, 2}}, MaskKind::padding, 2), 4, 2, 3,
                         true);
  const AttentionInputs in = generate_inputs(p, 5);
  // The same problem with every kv head repeated for its query heads.
  auto rp = p;
  rp.shape.heads_kv = 4;
  AttentionInputs rin = in;
  rin.k.assign(4 * 4 * 3, 0.0);
  rin.v.assign(4 * 4 * 3, 0.0);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t c = 0; c < 3; ++c) {
        rin.k[(t * 4 + h) * 3 + c] = in.k[(t * 2 + h / 2) * 3 + c];
        rin.v[(t * 4 + h) * 3 + c] = in.v[(t * 2 + h / 2) * 3 + c];
      }
  for (Formulation f : {&ref::attention_dense_masked, &ref::attention_per_document}) {
    const AttentionResult g = run(f, p, in), r = run(f, rp, rin);
    expect_close(g.o, r.o, "o");
    expect_close(g.lse, r.lse, "lse");
    expect_close(g.grads->dq, r.grads->dq, "dq");
    std::vector<double> dk(in.k.size(), 0.0), dv(in.v.size(), 0.0);
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t c = 0; c < 3; ++c) {
          dk[(t * 2 + h / 2) * 3 + c] += r.grads->dk[(t * 4 + h) * 3 + c];
          dv[(t * 2 + h / 2) * 3 + c] += r.grads->dv[(t * 4 + h) * 3 + c];
        }
    expect_close(g.grads->dk, dk, "dk");
    expect_close(g.grads->dv, dv, "dv");
  }
}

TEST(ReferenceAttention, BottomRightWithLongerQueryLeavesFirstQueriesEmpty) {
  // docs/semantics.md#10-worked-examples example 8: q0 and q1 attend nothing.
  const auto p = problem(batch({{1, 1, 1, 1}}, {{1, 1}}, MaskKind::causal_bottom_right, 1), 1,
                         1, 2, true);
  const AttentionInputs in = generate_inputs(p, 8);
  const AttentionResult d = run(&ref::attention_dense_masked, p, in);
  expect_same_result(run(&ref::attention_per_document, p, in), d);
  EXPECT_EQ(d.lse[0], -kInf);
  EXPECT_EQ(d.lse[1], -kInf);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(d.o[c], 0.0);
  EXPECT_EQ(d.o[4], in.v[0]);  // q2 sees kv0 only
  EXPECT_TRUE(std::isfinite(d.lse[3]));
}

// ---------------------------------------------------------------------------
// Dense == per-document, and backward against finite differences
// ---------------------------------------------------------------------------

struct Case {
  std::string name;
  AttentionProblem problem;
};

std::vector<Case> representable_cases() {
  using M = MaskKind;
  std::vector<Case> cases = {
      {"no_mask", problem(batch({{1, 1, 2}}, {{1, 1, 2, 2}}, M::no_mask, 2), 2, 2, 3, true)},
      {"padding_cross", problem(batch({{1, 1, 0, 2, 2, 0}}, {{1, 1, 1, 0, 2, 2, 2, 2}},
                                      M::padding, 2), 1, 1, 3, true)},
      {"causal", problem(batch({{1, 1, 1, 2, 2}}, {{1, 1, 1, 2, 2}}, M::causal, 2), 1, 1, 3, true)},
      {"padding_causal_two_rows",
       problem(batch({{1, 1, 2, 2, 0}, {1, 1, 1, 0, 0}}, {{1, 1, 2, 2, 0}, {1, 1, 1, 0, 0}},
                     M::padding_causal, 2), 2, 1, 2, true)},
      {"bottom_right_q_longer",
       problem(batch({{1, 1, 1, 1}}, {{1, 1}}, M::causal_bottom_right, 1), 2, 2, 2, true)},
      {"padding_bottom_right_cross",
       problem(batch({{1, 1, 0, 2, 2, 2}}, {{1, 1, 1, 2, 2, 0, 0}},
                     M::padding_causal_bottom_right, 2), 1, 1, 3, true)},
      {"causal_window", problem(batch({{1, 1, 1, 1, 1}}, {{1, 1, 1, 1, 1}}, M::causal, 1, {1, -1}),
                                1, 1, 2, true)},
      {"no_mask_window", problem(batch({{1, 1, 1, 1}}, {{1, 1, 1, 1}}, M::no_mask, 1, {1, 1}), 1,
                                 1, 2, true)},
      {"bottom_right_window",
       problem(batch({{1, 1, 1}}, {{1, 1, 1, 1, 1}}, M::causal_bottom_right, 1, {1, -1}), 1, 1, 2,
               true)},
      {"gqa_padding_causal_window",
       problem(batch({{1, 1, 1, 2, 0}}, {{1, 1, 1, 2, 0}}, M::padding_causal, 2, {1, -1}), 4, 2,
               2, true)},
  };
  // Extra dims: q ids [2, 1, 4] against kv ids [1, 4]; positions [1, 4] broadcast.
  PackedBatch extra = batch({{1, 1, 1, 1}}, {{1, 1, 2, 2}}, M::padding_causal, 2);
  extra.q.segment_ids = IntArray({2, 1, 4}, {1, 1, 2, 2, 1, 1, 1, 0});
  extra.q.segment_pos = IntArray({1, 4}, {0, 1, 2, 3});
  extra.kv.segment_pos = IntArray({1, 4}, {0, 1, 2, 3});
  cases.push_back({"extra_dims", problem(extra, 2, 1, 2, true)});
  // Offset positions on both sides stay representable under top-left causal.
  PackedBatch offset = batch({{1, 1, 1}}, {{1, 1, 1}}, M::causal, 1);
  offset.q.segment_pos = offset.kv.segment_pos = IntArray({1, 3}, {5, 6, 7});
  cases.push_back({"causal_offset_positions", problem(offset, 1, 1, 2, true)});
  return cases;
}

TEST(ReferenceAttention, DenseMatchesPerDocumentOnRepresentableBatches) {
  for (const Case& c : representable_cases()) {
    SCOPED_TRACE(c.name);
    const ref::Representability rep = ref::representability(c.problem.batch);
    ASSERT_TRUE(rep.representable) << rep.first_difference;
    const AttentionInputs in = generate_inputs(c.problem, 42);
    const AttentionResult dense = run(&ref::attention_dense_masked, c.problem, in);
    expect_same_result(run(&ref::attention_per_document, c.problem, in), dense);
    for (double x : dense.o) EXPECT_FALSE(std::isnan(x));
  }
}

// sum(O * dO) of the forward pass alone.
double loss(Formulation f, const AttentionProblem& p, const AttentionInputs& in) {
  AttentionProblem fwd = p;
  fwd.shape.backward = false;
  AttentionInputs fin = in;
  fin.d_o.clear();
  const AttentionResult r = run(f, fwd, fin);
  double l = 0.0;
  for (size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * in.d_o[i];
  return l;
}

// Central differences with step 1e-6; truncation O(h^2) and cancellation
// ~1e-16 / h leave ~1e-10, far inside the 1e-6 relative tolerance.
void expect_matches_finite_differences(Formulation f, const AttentionProblem& p,
                                       const AttentionInputs& in) {
  const AttentionResult r = run(f, p, in);
  ASSERT_TRUE(r.grads.has_value());
  const double h = 1e-6;
  const std::pair<std::vector<double> AttentionInputs::*, const std::vector<double>*> tensors[] = {
      {&AttentionInputs::q, &r.grads->dq},
      {&AttentionInputs::k, &r.grads->dk},
      {&AttentionInputs::v, &r.grads->dv}};
  const char* names[] = {"dq", "dk", "dv"};
  for (int t = 0; t < 3; ++t) {
    const auto [member, grad] = tensors[t];
    for (size_t i = 0; i < (in.*member).size(); ++i) {
      AttentionInputs plus = in, minus = in;
      (plus.*member)[i] += h;
      (minus.*member)[i] -= h;
      const double fd = (loss(f, p, plus) - loss(f, p, minus)) / (2 * h);
      EXPECT_NEAR((*grad)[i], fd, 1e-6 * std::max(1.0, std::fabs(fd)))
          << names[t] << "[" << i << "]";
    }
  }
}

TEST(ReferenceAttention, BackwardMatchesFiniteDifferencesForEveryMaskKind) {
  for (const Case& c : representable_cases()) {
    SCOPED_TRACE(c.name);
    const AttentionInputs in = generate_inputs(c.problem, 1234);
    expect_matches_finite_differences(&ref::attention_dense_masked, c.problem, in);
    expect_matches_finite_differences(&ref::attention_per_document, c.problem, in);
  }
}

}  // namespace
}  // namespace attn_oracle
