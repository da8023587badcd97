// attention_twin_test.cpp: the CPU twin of the fused attention kernels
// (gpu/src/attention_twin.cpp) on hand cases and handmade batches.
//
//  - Hand cases: one query one key copies V; query head h reads kv head
//    h / (Hq / Hkv); a query the window or bottom-right alignment empties gives
//    o = 0, lse = -inf, dq = 0; a side of length 0; tokens outside every document are written as 0
//    by attention_twin_into, which touches nothing outside the outputs; bad_heads,
//    bad_tensor_shape, and batch errors passed through from the metadata path.
//  - Twin vs the float64 dense reference within check_attention_tolerance on
//    representable batches that cross tile edges (documents of 17..50 tokens):
//    cross-attention, bottom-right with q longer than kv, windows that skip
//    tiles, several documents per row, two rows, extra dims, GQA / MQA, head_dim
//    64 and 1, each dtype, forward and backward. The worst error / budget per
//    dtype and tensor is printed.
//  - The Hopper forward's schedule (FlashArch::sm90) within tolerance on documents
//    longer than its tiles, and not the SM80 schedule's bit for bit.
//  - Determinism: two runs are bitwise identical.
// The attention properties of the conformance suite run the twin on generated
// inputs (`attn-oracle check --backend cpu`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Ids = std::vector<int64_t>;

// `n` tokens of document `id` (0 = padding).
Ids run(int64_t id, int64_t n) { return Ids(n, id); }
Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Positions 0, 1, ... inside each document, 0 on padding.
Ids positions(const Ids& ids) {
  Ids pos(ids.size(), 0);
  for (size_t t = 1; t < ids.size(); ++t)
    if (ids[t] != 0 && ids[t] == ids[t - 1]) pos[t] = pos[t - 1] + 1;
  return pos;
}

// One side from B rows of equal length.
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

PackedBatch batch(const std::vector<Ids>& q, const std::vector<Ids>& kv, MaskKind mask, int64_t max_segments,
                  Window window = {}) {
  return PackedBatch{side(q), side(kv), mask, window, max_segments};
}

AttentionProblem problem(PackedBatch b, int64_t hq, int64_t hkv, int64_t dim, bool backward,
                         Dtype dtype = Dtype::fp32) {
  return AttentionProblem{std::move(b), AttentionShape{hq, hkv, dim, std::nullopt, dtype, backward}};
}

AttentionResult twin(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = gpu::attention_twin(p, in);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : AttentionResult{};
}

ErrorCode twin_error(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = gpu::attention_twin(p, in);
  EXPECT_FALSE(r.ok());
  return r.ok() ? ErrorCode::unsupported : r.error().code;
}

// ---------------------------------------------------------------------------
// Hand cases
// ---------------------------------------------------------------------------

TEST(AttentionTwin, OneQueryOneKeyCopiesV) {
  const auto p = problem(batch({{1}}, {{1}}, MaskKind::padding, 1), 1, 1, 2, false);
  const AttentionInputs in{{1.0, 2.0}, {0.5, -1.0}, {3.0, 4.0}, {}};
  const AttentionResult r = twin(p, in);
  EXPECT_EQ(r.o, (std::vector<double>{3.0, 4.0}));
  EXPECT_NEAR(r.lse[0], (0.5 - 2.0) / std::sqrt(2.0), 1e-6);  // lse is fp32
  EXPECT_FALSE(r.grads.has_value());
}

TEST(AttentionTwin, QueryHeadReadsKvHeadHOverGroup) {
  // One query, one key; kv head g holds v = 10 (g + 1). Hq = 4, Hkv = 2:
  // heads 0, 1 read kv head 0 and heads 2, 3 kv head 1 (h % Hkv would interleave).
  const auto p = problem(batch({{1}}, {{1}}, MaskKind::padding, 1), 4, 2, 1, false);
  const AttentionInputs in{{1.0, 1.0, 1.0, 1.0}, {1.0, 1.0}, {10.0, 20.0}, {}};
  EXPECT_EQ(twin(p, in).o, (std::vector<double>{10.0, 10.0, 20.0, 20.0}));
}

TEST(AttentionTwin, EmptiedQueriesAreZeroWithMinusInfLse) {
  // Bottom-right, q 4 against kv 2: q0, q1 see nothing (docs/semantics.md#10-worked-examples,
  // example ex8). And no_mask with window (0, 0), q 4 against kv 2: q2, q3 lie past every key.
  for (const auto& [mask, window] : {std::pair{MaskKind::causal_bottom_right, Window{}},
                                     std::pair{MaskKind::no_mask, Window{0, 0}}}) {
    const auto p = problem(batch({{1, 1, 1, 1}}, {{1, 1}}, mask, 1, window), 2, 1, 3, true, Dtype::bf16);
    ASSERT_TRUE(ref::representability(p.batch).representable);
    const AttentionResult r = twin(p, generate_inputs(p, 8));
    const int64_t empty0 = mask == MaskKind::no_mask ? 2 : 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i) {
        const bool empty = i == empty0 || i == empty0 + 1;
        EXPECT_EQ(std::isinf(r.lse[h * 4 + i]), empty) << "head " << h << " query " << i;
        for (int64_t c = 0; c < 3 && empty; ++c) {
          const int64_t at = (i * 2 + h) * 3 + c;
          EXPECT_EQ(r.o[at], 0.0);
          EXPECT_EQ(r.grads->dq[at], 0.0);
        }
      }
    for (double x : r.lse) EXPECT_TRUE(std::isfinite(x) || x == -kInf);
  }
}

TEST(AttentionTwinInto, WritesUncoveredTokensAsZeroAndNothingOutside) {
  // q token 1 and kv token 2 are padding; kv token 3 is a document no query has.
  const auto p = problem(batch({{1, 0}}, {{1, 1, 0, 2}}, MaskKind::padding, 2), 2, 1, 3, true, Dtype::fp16);
  const AttentionInputs in = generate_inputs(p, 11);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr int64_t kGuard = 8;
  // Each output between guards, all NaN before the call.
  std::vector<double> o(12 + 2 * kGuard, nan), lse(4 + 2 * kGuard, nan), dq(12 + 2 * kGuard, nan),
      dk(12 + 2 * kGuard, nan), dv(12 + 2 * kGuard, nan);
  const gpu::AttentionOutputs out{o.data() + kGuard, lse.data() + kGuard, dq.data() + kGuard, dk.data() + kGuard,
                                  dv.data() + kGuard};
  ASSERT_FALSE(gpu::attention_twin_into(p, in, out).has_value());
  for (std::vector<double>* t : {&o, &lse, &dq, &dk, &dv}) {
    const int64_t n = static_cast<int64_t>(t->size());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan((*t)[i]), i < kGuard || i >= n - kGuard) << i;
  }
  const double* O = out.o;
  for (int64_t c = 6; c < 12; ++c) EXPECT_EQ(O[c], 0.0);           // q token 1, both heads
  for (int64_t c = 6; c < 12; ++c) EXPECT_EQ(out.dq[c], 0.0);      // its dq
  for (int64_t c = 6; c < 12; ++c) EXPECT_EQ(out.dk[c], 0.0);      // kv tokens 2, 3
  for (int64_t c = 6; c < 12; ++c) EXPECT_EQ(out.dv[c], 0.0);
  EXPECT_EQ(out.lse[1], -kInf);
  EXPECT_EQ(out.lse[3], -kInf);
  EXPECT_NE(out.dv[0], 0.0);
  // The same values as the allocating entry point.
  const AttentionResult r = twin(p, in);
  EXPECT_EQ(std::vector<double>(O, O + 12), r.o);
  EXPECT_EQ(std::vector<double>(out.dk, out.dk + 12), r.grads->dk);
}

TEST(AttentionTwin, EmptySidesGiveZerosAndMinusInf) {
  // kv of length 0: no document, every query attends nothing; q of length 0: nothing to write.
  PackedBatch no_kv = batch({{1, 1}}, {{1}}, MaskKind::padding, 1);
  no_kv.kv = PackedSide{IntArray({1, 0}, {}), IntArray({1, 0}, {})};
  const auto p = problem(no_kv, 2, 1, 3, true, Dtype::bf16);
  const AttentionResult r = twin(p, generate_inputs(p, 4));
  EXPECT_EQ(r.o, std::vector<double>(12, 0.0));
  EXPECT_EQ(r.lse, std::vector<double>(4, -kInf));
  EXPECT_EQ(r.grads->dq, std::vector<double>(12, 0.0));
  EXPECT_TRUE(r.grads->dk.empty() && r.grads->dv.empty());
  PackedBatch no_q = batch({{1}}, {{1, 1}}, MaskKind::padding, 1);
  no_q.q = PackedSide{IntArray({1, 0}, {}), IntArray({1, 0}, {})};
  const auto pq = problem(no_q, 1, 1, 2, true);
  const AttentionResult rq = twin(pq, generate_inputs(pq, 4));
  EXPECT_TRUE(rq.o.empty() && rq.lse.empty());
  EXPECT_EQ(rq.grads->dk, std::vector<double>(4, 0.0));
}

TEST(AttentionTwin, RejectsBadHeads) {
  const PackedBatch b = batch({{1, 1}}, {{1, 1}}, MaskKind::padding, 1);
  for (const auto& [hq, hkv, dim] : {std::tuple{3, 2, 4}, std::tuple{0, 1, 4}, std::tuple{2, 0, 4}, std::tuple{2, 1, 0}}) {
    const auto p = problem(b, hq, hkv, dim, false);
    EXPECT_EQ(twin_error(p, AttentionInputs{}), ErrorCode::bad_heads) << hq << " " << hkv << " " << dim;
  }
}

TEST(AttentionTwin, RejectsBadTensorShapes) {
  const auto p = problem(batch({{1, 1}}, {{1, 1, 1}}, MaskKind::padding, 1), 2, 1, 4, false);
  const AttentionInputs good = generate_inputs(p, 3);
  ASSERT_TRUE(gpu::attention_twin(p, good).ok());
  for (auto member : {&AttentionInputs::q, &AttentionInputs::k, &AttentionInputs::v}) {
    AttentionInputs bad = good;
    (bad.*member).pop_back();
    EXPECT_EQ(twin_error(p, bad), ErrorCode::bad_tensor_shape);
  }
  AttentionInputs with_do = good;
  with_do.d_o = good.q;  // dO without backward
  EXPECT_EQ(twin_error(p, with_do), ErrorCode::bad_tensor_shape);
  auto bwd = p;
  bwd.shape.backward = true;  // backward without dO
  EXPECT_EQ(twin_error(bwd, good), ErrorCode::bad_tensor_shape);
  // attention_twin_into says the same and writes nothing.
  double sentinel = 7.0;
  const gpu::AttentionOutputs out{&sentinel, &sentinel};
  AttentionInputs short_q = good;
  short_q.q.pop_back();
  EXPECT_EQ(gpu::attention_twin_into(p, short_q, out)->code, ErrorCode::bad_tensor_shape);
  EXPECT_EQ(sentinel, 7.0);
  // A backward problem whose dk buffer is null: refused before anything is written.
  AttentionInputs with_grad = good;
  with_grad.d_o = good.q;
  const gpu::AttentionOutputs no_dk{&sentinel, &sentinel, &sentinel, nullptr, &sentinel};
  EXPECT_EQ(gpu::attention_twin_into(bwd, with_grad, no_dk)->code, ErrorCode::bad_tensor_shape);
  EXPECT_EQ(sentinel, 7.0);
}

TEST(AttentionTwin, BatchErrorsComeFromTheMetadataPathFirst) {
  // Row error (id 2 > M = 1) and bad heads: the batch error wins, unchanged.
  const auto p = problem(batch({{1, 2}}, {{1, 1}}, MaskKind::padding, 1), 3, 2, 4, false);
  auto r = gpu::attention_twin(p, AttentionInputs{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::too_many_segments);
  EXPECT_NE(r.error().message.find("row 0, token 1"), std::string::npos) << r.error().message;
}

// ---------------------------------------------------------------------------
// Twin vs the float64 reference on handmade batches
// ---------------------------------------------------------------------------

struct Case {
  std::string name;
  AttentionProblem problem;  // fp32; run in every dtype
};

std::vector<Case> handmade_cases() {
  using M = MaskKind;
  std::vector<Case> cases = {
      {"causal_three_tiles", problem(batch({run(1, 40)}, {run(1, 40)}, M::causal, 1), 2, 1, 8, true)},
      {"padding_cross_two_docs",
       problem(batch({cat({run(1, 20), run(0, 3), run(2, 18)})}, {cat({run(1, 33), run(2, 7), run(0, 2)})},
                     M::padding, 2), 2, 2, 16, true)},
      {"bottom_right_q_longer",
       problem(batch({run(1, 37)}, {cat({run(1, 21), run(0, 4)})}, M::padding_causal_bottom_right, 1), 1, 1, 4, true)},
      {"bottom_right_two_rows",
       problem(batch({cat({run(1, 10), run(2, 25), run(0, 3)}), run(1, 38)},
                     {cat({run(1, 30), run(2, 18)}), cat({run(1, 20), run(0, 28)})},
                     M::padding_causal_bottom_right, 2), 2, 1, 8, true)},
      {"causal_window_skips_tiles",
       problem(batch({run(1, 50)}, {run(1, 50)}, M::causal, 1, {5, -1}), 1, 1, 8, true)},
      {"no_mask_window_both_sides",
       problem(batch({run(1, 40)}, {run(1, 44)}, M::no_mask, 1, {3, 17}), 1, 1, 2, true)},
      {"bottom_right_window_kv_longer",
       problem(batch({run(1, 20)}, {run(1, 50)}, M::causal_bottom_right, 1, {7, -1}), 2, 2, 4, true)},
      {"many_short_documents",
       problem(batch({cat({run(1, 1), run(2, 2), run(3, 3), run(4, 17), run(5, 1), run(0, 2), run(6, 5)})},
                     {cat({run(1, 2), run(2, 1), run(3, 3), run(4, 20), run(5, 4), run(6, 5), run(0, 1)})},
                     M::padding_causal, 6), 2, 1, 8, true)},
      {"head_dim_64_gqa",
       problem(batch({cat({run(1, 18), run(2, 30)})}, {cat({run(1, 18), run(2, 30)})}, M::padding_causal, 2), 4, 2,
               64, true)},
      {"head_dim_1_mqa", problem(batch({run(1, 33)}, {run(1, 33)}, M::causal, 1), 3, 1, 1, true)},
  };
  // Extra dims: q ids [2, 1, 20] against kv ids [1, 24], q positions [1, 20]
  // broadcast; the second slice's document 2 has no keys.
  PackedBatch extra = batch({run(1, 20)}, {run(1, 24)}, M::padding_causal, 2);
  extra.q.segment_ids = IntArray({2, 1, 20}, cat({run(1, 20), run(1, 9), run(2, 11)}));
  extra.q.segment_pos = IntArray({1, 20}, positions(run(1, 20)));
  cases.push_back({"extra_dims", problem(extra, 2, 1, 4, true)});
  return cases;
}

TEST(AttentionTwin, MatchesTheReferenceWithinToleranceInEveryDtype) {
  std::map<std::string, double> worst;  // "dtype tensor" -> worst error / budget
  for (const Case& c : handmade_cases()) {
    const ref::Representability rep = ref::representability(c.problem.batch);
    ASSERT_TRUE(rep.representable) << c.name << ": " << rep.first_difference;
    for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
      SCOPED_TRACE(c.name + " " + std::string(to_string(dtype)));
      AttentionProblem p = c.problem;
      p.shape.dtype = dtype;
      const AttentionInputs in = generate_inputs(p, 2026);
      const AttentionResult want = ref::attention_dense_masked(p, in).value();
      const AttentionResult got = twin(p, in);
      for (const ToleranceCheck& check : check_attention_tolerance(p, in, got, want)) {
        EXPECT_TRUE(check.pass) << check.describe();
        double& w = worst[std::string(to_string(dtype)) + " " + check.tensor];
        w = std::max(w, check.ratio);
      }
    }
  }
  for (const auto& [what, ratio] : worst)
    std::cout << "[ ratio    ] " << std::left << std::setw(10) << what << " worst error / budget " << ratio << "\n";
}

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The Hopper forward's schedule (flash_tile.hpp: 128 x 128 tiles, 128 x 64 at head
// dim 256) on documents longer than its tiles: within the tolerance rule, and its own
// (the rounding of P follows the tiles' running max, so some output differs from
// the SM80 schedule's: the arch reaches the tiles).
TEST(AttentionTwin, HopperScheduleMatchesTheReferenceAndIsItsOwn) {
  using M = MaskKind;
  const std::vector<Case> cases = {
      {"causal_gqa_three_key_tiles", problem(batch({run(1, 300)}, {run(1, 300)}, M::causal, 1), 4, 2, 64, true)},
      {"causal_window_skips_tiles",
       problem(batch({run(1, 290)}, {run(1, 290)}, M::causal, 1, {100, -1}), 1, 1, 64, true)},
      {"bottom_right_two_documents",
       problem(batch({cat({run(1, 150), run(2, 140)})}, {cat({run(1, 40), run(2, 250)})},
                     M::padding_causal_bottom_right, 2), 2, 1, 32, true)},
      {"head_dim_256", problem(batch({run(1, 200)}, {run(1, 200)}, M::causal, 1), 1, 1, 256, false)},
  };
  bool differs = false;
  for (const Case& c : cases) {
    AttentionProblem p = c.problem;
    p.shape.dtype = Dtype::bf16;
    SCOPED_TRACE(c.name);
    const AttentionInputs in = generate_inputs(p, 90);
    const AttentionResult want = ref::attention_dense_masked(p, in).value();
    auto got = gpu::attention_twin(p, in, gpu::FlashArch::sm90);
    ASSERT_TRUE(got.ok()) << got.error().message;
    for (const ToleranceCheck& check : check_attention_tolerance(p, in, got.value(), want))
      EXPECT_TRUE(check.pass) << check.describe();
    differs = differs || !bitwise_equal(got->o, twin(p, in).o);
  }
  EXPECT_TRUE(differs) << "the sm90 schedule gave the sm80 schedule's outputs bit for bit on every case";
}

TEST(AttentionTwin, ForwardOnlyEqualsTheForwardOfABackwardRun) {
  for (const Case& c : handmade_cases()) {
    AttentionProblem p = c.problem;
    p.shape.dtype = Dtype::bf16;
    const AttentionInputs in = generate_inputs(p, 5);
    AttentionProblem fwd = p;
    fwd.shape.backward = false;
    AttentionInputs fin = in;
    fin.d_o.clear();
    const AttentionResult a = twin(p, in), b = twin(fwd, fin);
    EXPECT_EQ(a.o, b.o) << c.name;
    EXPECT_EQ(a.lse, b.lse) << c.name;
    EXPECT_FALSE(b.grads.has_value());
  }
}

TEST(AttentionTwin, TwoRunsAreBitwiseIdentical) {
  for (const Case& c : handmade_cases()) {
    AttentionProblem p = c.problem;
    p.shape.dtype = Dtype::fp16;
    const AttentionInputs in = generate_inputs(p, 77);
    const AttentionResult a = twin(p, in), b = twin(p, in);
    EXPECT_TRUE(bitwise_equal(a.o, b.o)) << c.name;
    EXPECT_TRUE(bitwise_equal(a.lse, b.lse)) << c.name;
    ASSERT_TRUE(a.grads && b.grads);
    EXPECT_TRUE(bitwise_equal(a.grads->dq, b.grads->dq)) << c.name;
    EXPECT_TRUE(bitwise_equal(a.grads->dk, b.grads->dk)) << c.name;
    EXPECT_TRUE(bitwise_equal(a.grads->dv, b.grads->dv)) << c.name;
  }
}

// The entry points read nothing outside a tensor, whatever metadata they get:
// spans that leave their row, run past the rows or go backwards are bad_metadata.
TEST(DocumentSpans, OnlyMetadataInsideItsTensorsPasses) {
  Metadata md;
  md.cu_seqlens_q = {0, 2, 3};
  md.cu_seqlens_kv = {0, 1, 3};
  md.ragged_offsets_q = {0, 4, 8};  // row 0 tokens [0, 2), row 1 tokens [0, 1); 2 rows of 4
  md.ragged_offsets_kv = {1, 6, 8};
  EXPECT_FALSE(gpu::check_document_spans(md, 2, 4, 4).has_value());
  auto code = [](const Metadata& m) {
    const auto e = gpu::check_document_spans(m, 2, 4, 4);
    return e ? std::string(to_string(e->code)) + ": " + e->message : std::string("accepted");
  };
  Metadata past_row = md;
  past_row.ragged_offsets_kv[1] = 7;  // [7, 9) crosses into row 2
  EXPECT_EQ(code(past_row).rfind("bad_metadata: kv document 1", 0), 0u) << code(past_row);
  Metadata past_rows = md;
  past_rows.ragged_offsets_q[1] = 8;
  EXPECT_EQ(code(past_rows).rfind("bad_metadata", 0), 0u) << code(past_rows);
  Metadata backwards = md;
  backwards.cu_seqlens_q = {0, 3, 2};
  EXPECT_EQ(code(backwards).rfind("bad_metadata", 0), 0u) << code(backwards);
  Metadata not_from_zero = md;
  not_from_zero.cu_seqlens_kv = {1, 2, 3};
  EXPECT_EQ(code(not_from_zero).rfind("bad_metadata: cu_seqlens_kv does not start at 0", 0), 0u) << code(not_from_zero);
  Metadata unpaired = md;
  unpaired.cu_seqlens_kv = {0, 3};
  EXPECT_EQ(code(unpaired).rfind("bad_metadata", 0), 0u) << code(unpaired);
}

}  // namespace
}  // namespace attn_oracle
