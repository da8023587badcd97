// small_seq_twin_test.cpp: the CPU twin of the small-sequence kernels
// (gpu/src/small_seq_twin.cpp, docs/semantics.md#8-small-sequence-problems) on handmade batches.
//
//  - Hand case: one key copies V, P = [1, 0, ...].
//  - Twin vs the float64 references within the tolerance rule on two rows of
//    documents with 1, 7 and 16 keys, padding, a kv document without a query
//    (dk = dv = 0), striped positions, a document whose keys are all masked
//    (o = 0, P row 0, dq = 0), every mask kind, with and without a window, GQA and
//    MQA, every dtype, head_dim 64 and 40, forward and backward. o, dq, dk, dv
//    against ref::attention_dense_masked (the same problem as plain attention)
//    with check_tolerance and naive_same_precision; P against ref::small_seq
//    (to 1e-5) when it is built, and always: P rows sum to 1 or are all 0, zero
//    past the keys.
//  - Errors: 17 keys and 0 keys (small_seq_key_count), two queries
//    (small_seq_query_count), documents checked in order, bad_heads before the
//    documents, batch errors first, bad_tensor_shape last; the same codes as
//    small_seq_documents when the reference has it.
//  - Determinism: two runs are bitwise identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/small_seq.hpp"
#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"

namespace attn_oracle {
namespace {

using Ids = std::vector<int64_t>;

struct Row {
  Ids q_ids, q_pos, kv_ids, kv_pos;
};

PackedSide side_of(const std::vector<Row>& rows, bool q) {
  Ids ids, pos;
  for (const Row& r : rows) {
    const Ids& i = q ? r.q_ids : r.kv_ids;
    const Ids& p = q ? r.q_pos : r.kv_pos;
    ids.insert(ids.end(), i.begin(), i.end());
    pos.insert(pos.end(), p.begin(), p.end());
  }
  const int64_t B = static_cast<int64_t>(rows.size()), T = B ? static_cast<int64_t>(ids.size()) / B : 0;
  return PackedSide{IntArray({B, T}, ids), IntArray({B, T}, pos)};
}

AttentionProblem problem_of(const std::vector<Row>& rows, MaskKind mask, Window window, int64_t hq, int64_t hkv,
                            int64_t d, Dtype dtype, bool backward, int64_t m = 4) {
  AttentionProblem p;
  p.batch.q = side_of(rows, true);
  p.batch.kv = side_of(rows, false);
  p.batch.mask = mask;
  p.batch.window = window;
  p.batch.max_segments = m;
  p.shape = AttentionShape{hq, hkv, d, std::nullopt, dtype, backward};
  return p;
}

Ids iota(int64_t from, int64_t n, int64_t step = 1) {
  Ids out;
  for (int64_t i = 0; i < n; ++i) out.push_back(from + i * step);
  return out;
}
Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Row 0: doc 1 (7 keys at 0..6, query at 3: causal masks 4..6), padding, doc 2
// (16 keys, query at 20), doc 3 (1 key at 5, query at 0: causal masks it all),
// doc 4 on the kv side only. Row 1: doc 1 (16 striped keys 1, 3, ..., 31, query
// at 12), doc 3 (1 key, query at 9).
std::vector<Row> padded_rows() {
  Row r0{{1, 0, 2, 3, 0}, {3, 0, 20, 0, 0},
         cat({Ids(7, 1), {0}, Ids(16, 2), {3}, Ids(3, 4)}),
         cat({iota(0, 7), {0}, iota(0, 16), {5}, iota(0, 3)})};
  Row r1{{0, 1, 3, 0, 0}, {0, 12, 9, 0, 0},
         cat({Ids(16, 1), {3}, Ids(11, 0)}),
         cat({iota(1, 16, 2), {0}, Ids(11, 0)})};
  return {r0, r1};
}

// No padding (for no_mask / causal / causal_bottom_right): docs of 1, 7, 16 keys.
std::vector<Row> dense_rows() {
  Row r{{1, 2, 3}, {0, 4, 15}, cat({Ids(1, 1), Ids(7, 2), Ids(16, 3)}), cat({{2}, iota(0, 7), iota(0, 16)})};
  return {r};
}

SmallSeqResult twin(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = gpu::small_seq_twin(p, in);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : SmallSeqResult{};
}

// Whether ref::small_seq is built yet (it was written concurrently with the twin).
bool reference_available(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = ref::small_seq(p, in);
  return r.ok() || r.error().code != ErrorCode::unsupported;
}

void expect_p_rows_well_formed(const SmallSeqResult& r, int64_t hq) {
  const int64_t rows = static_cast<int64_t>(r.p.size()) / kSmallSeqMaxKeys;
  EXPECT_GT(rows, 0);
  (void)hq;
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < kSmallSeqMaxKeys; ++j) {
      const double x = r.p[i * kSmallSeqMaxKeys + j];
      EXPECT_TRUE(x >= 0.0 && x <= 1.0) << "P row " << i << " slot " << j << " = " << x;
      sum += x;
    }
    EXPECT_TRUE(sum == 0.0 || std::fabs(sum - 1.0) < 1e-5) << "P row " << i << " sums to " << sum;
  }
}

// o, dq, dk, dv against the dense float64 reference within the tolerance rule; P
// against ref::small_seq when built.
void expect_matches_references(const AttentionProblem& p, const AttentionInputs& in, const SmallSeqResult& got,
                               const std::string& label) {
  SCOPED_TRACE(label);
  const auto dense = ref::attention_dense_masked(p, in);
  ASSERT_TRUE(dense.ok()) << dense.error().message;
  const AttentionResult naive = naive_same_precision(p, in);
  const Dtype dt = p.shape.dtype;
  std::vector<ToleranceCheck> checks{check_tolerance("o", got.o, dense->o, naive.o, kOutputToleranceFactor, dt)};
  if (p.shape.backward) {
    ASSERT_TRUE(got.grads.has_value());
    const AttentionGradients &g = *got.grads, &r = *dense->grads, &n = *naive.grads;
    checks.push_back(check_tolerance("dq", g.dq, r.dq, n.dq, kGradientToleranceFactor, dt));
    checks.push_back(check_tolerance("dk", g.dk, r.dk, n.dk, kGradientToleranceFactor, dt));
    checks.push_back(check_tolerance("dv", g.dv, r.dv, n.dv, kGradientToleranceFactor, dt));
  }
  for (const ToleranceCheck& c : checks) EXPECT_TRUE(c.pass) << c.describe();
  expect_p_rows_well_formed(got, p.shape.heads_q);
  if (!reference_available(p, in)) return;
  const auto ref = ref::small_seq(p, in);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->p.size(), got.p.size());
  for (size_t i = 0; i < got.p.size(); ++i) ASSERT_NEAR(got.p[i], ref->p[i], 1e-5) << "P[" << i << "]";
}

TEST(SmallSeqTwin, OneKeyCopiesV) {
  Row r{{1}, {0}, {1}, {0}};
  const AttentionProblem p = problem_of({r}, MaskKind::causal, {}, 1, 1, 64, Dtype::bf16, true, 1);
  const AttentionInputs in = generate_inputs(p, 7);
  const SmallSeqResult got = twin(p, in);
  EXPECT_EQ(got.o, in.v);
  ASSERT_EQ(got.p.size(), 16u);
  EXPECT_EQ(got.p[0], 1.0);
  for (int j = 1; j < 16; ++j) EXPECT_EQ(got.p[j], 0.0);
  for (double x : got.grads->dq) EXPECT_EQ(x, 0.0);  // softmax over one key: no gradient to q or k
  EXPECT_EQ(got.grads->dv, in.d_o);
}

TEST(SmallSeqTwin, AllMaskedKeysGiveZeroRow) {
  // Doc 3 of row 0 in padded_rows: query at 0, its one key at 5, causal.
  const AttentionProblem p = problem_of(padded_rows(), MaskKind::padding_causal, {}, 2, 1, 64, Dtype::fp32, true);
  const AttentionInputs in = generate_inputs(p, 11);
  const SmallSeqResult got = twin(p, in);
  // Documents in order: row 0 docs 1, 2, 3 -> document index 2; [docs, Hq, 16].
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(got.p[(2 * 2 + h) * 16 + j], 0.0);
  const int64_t token = 3, D = 64;  // row 0, position 3 of q
  for (int h = 0; h < 2; ++h)
    for (int64_t c = 0; c < D; ++c) {
      EXPECT_EQ(got.o[(token * 2 + h) * D + c], 0.0);
      EXPECT_EQ(got.grads->dq[(token * 2 + h) * D + c], 0.0);
    }
}

TEST(SmallSeqTwin, MatchesReferencesOnHandmadeBatches) {
  struct Layout {
    std::vector<Row> rows;
    std::vector<MaskKind> masks;
  };
  const std::vector<Layout> layouts{
      {padded_rows(), {MaskKind::padding, MaskKind::padding_causal, MaskKind::padding_causal_bottom_right}},
      {dense_rows(), {MaskKind::no_mask, MaskKind::causal, MaskKind::causal_bottom_right}}};
  const std::vector<Window> windows{{-1, -1}, {2, 1}, {0, 0}};
  struct Heads {
    int64_t hq, hkv, d;
  };
  const std::vector<Heads> heads{{1, 1, 64}, {4, 2, 64}, {3, 1, 40}};
  uint64_t seed = 100;
  for (const Layout& l : layouts)
    for (MaskKind mask : l.masks)
      for (Window w : windows)
        for (const Heads& h : heads)
          for (Dtype dt : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
            const AttentionProblem p = problem_of(l.rows, mask, w, h.hq, h.hkv, h.d, dt, true);
            const AttentionInputs in = generate_inputs(p, ++seed);
            const std::string label = std::string(to_string(mask)) + " window (" + std::to_string(w.left) + ", " +
                                      std::to_string(w.right) + ") heads " + std::to_string(h.hq) + "/" +
                                      std::to_string(h.hkv) + " D " + std::to_string(h.d) + " " +
                                      std::string(to_string(dt));
            expect_matches_references(p, in, twin(p, in), label);
          }
}

TEST(SmallSeqTwin, ForwardOnlyHasNoGradients) {
  const AttentionProblem p = problem_of(padded_rows(), MaskKind::padding, {}, 2, 2, 64, Dtype::bf16, false);
  const SmallSeqResult got = twin(p, generate_inputs(p, 3));
  EXPECT_FALSE(got.grads.has_value());
  EXPECT_EQ(got.p.size(), size_t(5 * 2 * 16));  // 5 documents with a query
}

// The twin's code and, when the reference has it, small_seq_documents' code agree.
void expect_error(const AttentionProblem& p, const AttentionInputs& in, ErrorCode code) {
  auto got = gpu::small_seq_twin(p, in);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, code) << got.error().message;
  EXPECT_FALSE(got.error().message.empty());
  auto ref = small_seq_documents(p, &in);
  if (!ref.ok() && ref.error().code == ErrorCode::unsupported) return;  // reference not built yet
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.error().code, code) << ref.error().message;
}

TEST(SmallSeqTwin, RejectsBadDocumentsInOrder) {
  auto make = [](Row r, int64_t hkv = 1) {
    return problem_of({r}, MaskKind::padding, {}, 2, hkv, 64, Dtype::bf16, false);
  };
  auto inputs = [](const AttentionProblem& p) { return generate_inputs(p, 5); };
  const Row seventeen{{1}, {0}, Ids(17, 1), iota(0, 17)};
  expect_error(make(seventeen), inputs(make(seventeen)), ErrorCode::small_seq_key_count);
  const Row no_keys{{1, 2}, {0, 0}, {2, 0}, {0, 0}};
  expect_error(make(no_keys), inputs(make(no_keys)), ErrorCode::small_seq_key_count);
  const Row two_queries{{1, 1}, {0, 1}, {1, 1}, {0, 1}};
  expect_error(make(two_queries), inputs(make(two_queries)), ErrorCode::small_seq_query_count);
  // Document 1 has no keys, document 2 two queries: the first document wins.
  const Row first_wins{{1, 2, 2}, {0, 0, 1}, {2, 2, 0}, {0, 1, 0}};
  expect_error(make(first_wins), inputs(make(first_wins)), ErrorCode::small_seq_key_count);
  // Two queries and no keys in one document: the query count is checked first.
  const Row both{{1, 1}, {0, 1}, {0, 0}, {0, 0}};
  expect_error(make(both), inputs(make(both)), ErrorCode::small_seq_query_count);
  // bad_heads before the documents; the batch before the heads.
  expect_error(make(seventeen, 3), inputs(make(seventeen)), ErrorCode::bad_heads);
  AttentionProblem bad_batch = make(seventeen, 3);
  bad_batch.batch.max_segments = 0;
  expect_error(bad_batch, inputs(make(seventeen)), ErrorCode::bad_max_segments);
  // Tensor sizes last: a short q does not hide a bad document, and is caught on a good one.
  AttentionInputs short_q = inputs(make(seventeen));
  short_q.q.pop_back();
  expect_error(make(seventeen), short_q, ErrorCode::small_seq_key_count);
  const Row good{{1}, {0}, Ids(16, 1), iota(0, 16)};
  AttentionInputs short_good = inputs(make(good));
  short_good.q.pop_back();
  expect_error(make(good), short_good, ErrorCode::bad_tensor_shape);
}

TEST(SmallSeqTwin, IsDeterministic) {
  const AttentionProblem p = problem_of(padded_rows(), MaskKind::padding_causal, {3, -1}, 4, 2, 128, Dtype::bf16, true);
  const AttentionInputs in = generate_inputs(p, 9);
  const SmallSeqResult a = twin(p, in), b = twin(p, in);
  auto same_bits = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
  };
  EXPECT_TRUE(same_bits(a.o, b.o));
  EXPECT_TRUE(same_bits(a.p, b.p));
  EXPECT_TRUE(same_bits(a.grads->dq, b.grads->dq));
  EXPECT_TRUE(same_bits(a.grads->dk, b.grads->dk));
  EXPECT_TRUE(same_bits(a.grads->dv, b.grads->dv));
}

}  // namespace
}  // namespace attn_oracle
