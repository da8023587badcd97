// small_seq_reference_test.cpp: the float64 small-seq reference (small_seq.hpp).
//
// Hand-computed cases (one key copies v, equal keys split P evenly, a window
// masking one key, all keys masked, GQA head mapping), every error path in the
// documented order, P rows summing to 1 over allowed keys with exact zeros
// elsewhere, agreement with ref::attention_dense_masked on o, dq, dk and dv at
// 1e-12 relative (padding, several rows, extra dims, GQA, causal kinds,
// bottom-right, windows), and the backward against central finite differences
// of sum(O * dO).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"

namespace attn_oracle {
namespace {

using Ids = std::vector<int64_t>;
constexpr int64_t S = kSmallSeqMaxKeys;

// Positions 0, 1, ... inside each document, 0 on padding.
Ids positions(const Ids& ids) {
  Ids pos(ids.size(), 0);
  for (size_t t = 1; t < ids.size(); ++t)
    if (ids[t] != 0 && ids[t] == ids[t - 1]) pos[t] = pos[t - 1] + 1;
  return pos;
}

// One side from B rows of equal length; positions given, or per document from 0.
PackedSide side(const std::vector<Ids>& rows, const std::vector<Ids>& pos_rows = {}) {
  Ids ids, pos;
  for (size_t b = 0; b < rows.size(); ++b) {
    ids.insert(ids.end(), rows[b].begin(), rows[b].end());
    const Ids p = pos_rows.empty() ? positions(rows[b]) : pos_rows[b];
    pos.insert(pos.end(), p.begin(), p.end());
  }
  const Shape shape{int64_t(rows.size()), int64_t(rows[0].size())};
  return PackedSide{IntArray(shape, ids), IntArray(shape, pos)};
}

PackedBatch batch(PackedSide q, PackedSide kv, MaskKind mask, int64_t max_segments,
                  Window window = {}) {
  return PackedBatch{std::move(q), std::move(kv), mask, window, max_segments};
}

AttentionProblem problem(PackedBatch b, int64_t hq, int64_t hkv, int64_t dim, bool backward) {
  return AttentionProblem{std::move(b), AttentionShape{hq, hkv, dim, std::nullopt, Dtype::fp32,
                                                       backward}};
}

SmallSeqResult run(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = ref::small_seq(p, in);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : SmallSeqResult{};
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b,
                  const std::string& what, double rel = 1e-12) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << what << " at " << i;
    EXPECT_LE(std::fabs(a[i] - b[i]), rel * std::max(1.0, std::fabs(b[i])))
        << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

std::vector<double> slots(std::vector<double> head) {
  head.resize(S, 0.0);
  return head;
}

// P row of document n, query head h.
std::vector<double> p_row(const SmallSeqResult& r, int64_t n, int64_t hq, int64_t h) {
  const auto at = r.p.begin() + (n * hq + h) * S;
  return std::vector<double>(at, at + S);
}

void expect_error(const Expected<std::vector<SmallSeqDocument>>& e, ErrorCode code,
                  const std::vector<std::string>& mentions = {}) {
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, code) << to_string(e.error().code) << ": " << e.error().message;
  for (const std::string& m : mentions)
    EXPECT_NE(e.error().message.find(m), std::string::npos)
        << "'" << m << "' not in: " << e.error().message;
}

// ---------------------------------------------------------------------------
// Hand-computed cases
// ---------------------------------------------------------------------------

TEST(SmallSeqReference, OneKeyCopiesV) {
  const auto p = problem(batch(side({{1}}), side({{1}}), MaskKind::padding, 1), 1, 1, 2, true);
  const AttentionInputs in{{1.0, 2.0}, {0.5, -1.0}, {3.0, 4.0}, {0.25, -0.5}};
  const SmallSeqResult r = run(p, in);
  EXPECT_EQ(r.o, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(r.p, slots({1.0}));
  // One key: P is constant, so dq = dk = 0 and dv = dO.
  ASSERT_TRUE(r.grads.has_value());
  EXPECT_EQ(r.grads->dq, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(r.grads->dk, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(r.grads->dv, (std::vector<double>{0.25, -0.5}));
}

TEST(SmallSeqReference, TwoEqualKeysSplitEvenly) {
  const auto p = problem(batch(side({{1}}), side({{1, 1}}), MaskKind::padding, 1), 1, 1, 2, false);
  const AttentionInputs in{{1.0, 2.0}, {0.5, -1.0, 0.5, -1.0}, {2.0, 0.0, 4.0, 6.0}, {}};
  const SmallSeqResult r = run(p, in);
  EXPECT_EQ(r.p, slots({0.5, 0.5}));
  EXPECT_EQ(r.o, (std::vector<double>{3.0, 3.0}));
  EXPECT_FALSE(r.grads.has_value());
}

TEST(SmallSeqReference, WindowMasksOneKey) {
  // Query at position 1; window left = 0 keeps keys at positions >= 1 only.
  const auto b = batch(side({{1}}, {{1}}), side({{1, 1, 1}}, {{0, 1, 2}}), MaskKind::padding, 1,
                       Window{0, -1});
  const auto p = problem(b, 1, 1, 1, false);
  const AttentionInputs in{{0.0}, {1.0, 2.0, 3.0}, {10.0, 20.0, 40.0}, {}};  // q = 0: equal scores
  const SmallSeqResult r = run(p, in);
  EXPECT_EQ(r.p, slots({0.0, 0.5, 0.5}));
  EXPECT_EQ(r.o, (std::vector<double>{30.0}));
}

TEST(SmallSeqReference, AllKeysMaskedGivesZeros) {
  // Causal top-left: the query at position 0 precedes both keys.
  const auto b = batch(side({{1, 2}}, {{0, 3}}), side({{1, 1, 2}}, {{1, 2, 0}}), MaskKind::causal, 2);
  const auto p = problem(b, 2, 1, 3, true);
  const AttentionInputs in = generate_inputs(p, 11);
  const SmallSeqResult r = run(p, in);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(p_row(r, 0, 2, h), slots({})) << h;  // document 1: nothing attended
    EXPECT_EQ(p_row(r, 1, 2, h), slots({1.0})) << h;
  }
  for (int64_t c = 0; c < 2 * 3; ++c) {
    EXPECT_EQ(r.o[c], 0.0);
    EXPECT_EQ(r.grads->dq[c], 0.0);
  }
  for (int64_t c = 0; c < 2 * 3; ++c) {  // keys of document 1 (one kv head)
    EXPECT_EQ(r.grads->dk[c], 0.0);
    EXPECT_EQ(r.grads->dv[c], 0.0);
  }
  // A window can empty a query too: [pos - 0, pos + 0] misses every key.
  const auto w = problem(batch(side({{1}}, {{5}}), side({{1, 1}}), MaskKind::padding, 1, Window{0, 0}),
                         1, 1, 2, true);
  const SmallSeqResult rw = run(w, generate_inputs(w, 3));
  EXPECT_EQ(rw.p, slots({}));
  EXPECT_EQ(rw.o, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(rw.grads->dq, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(rw.grads->dk, std::vector<double>(4, 0.0));
}

TEST(SmallSeqReference, GqaQueryHeadReadsKvHeadHOverGroup) {
  // Hq = 4, Hkv = 2: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1.
  const auto p = problem(batch(side({{1}}), side({{1}}), MaskKind::padding, 1), 4, 2, 1, true);
  AttentionInputs in{{1, 2, 3, 4}, {0.5, -0.5}, {7.0, -3.0}, {1.0, 2.0, 3.0, 4.0}};
  const SmallSeqResult r = run(p, in);
  EXPECT_EQ(r.o, (std::vector<double>{7.0, 7.0, -3.0, -3.0}));
  EXPECT_EQ(r.grads->dv, (std::vector<double>{3.0, 7.0}));  // dO summed over each group

  // Two keys per document: same as repeating each kv head for its group.
  const auto g = problem(batch(side({{1, 2}}), side({{1, 1, 2, 2}}), MaskKind::padding, 2), 4, 2, 3,
                         true);
  const AttentionInputs gin = generate_inputs(g, 5);
  auto wide = g;
  wide.shape.heads_kv = 4;
  AttentionInputs win = gin;
  win.k.clear();
  win.v.clear();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t c = 0; c < 3; ++c) {
        win.k.push_back(gin.k[(t * 2 + h / 2) * 3 + c]);
        win.v.push_back(gin.v[(t * 2 + h / 2) * 3 + c]);
      }
  const SmallSeqResult a = run(g, gin), b = run(wide, win);
  expect_close(a.o, b.o, "o");
  expect_close(a.p, b.p, "p");
  expect_close(a.grads->dq, b.grads->dq, "dq");
}

TEST(SmallSeqReference, TokensOutsideDocumentsGetZero) {
  // q padding, and a kv document (id 1) that has no query.
  const auto p = problem(batch(side({{0, 2, 0}}), side({{1, 1, 2, 0}}), MaskKind::padding, 2), 2, 1,
                         2, true);
  const AttentionInputs in = generate_inputs(p, 9);
  const SmallSeqResult r = run(p, in);
  ASSERT_EQ(r.p.size(), size_t(1 * 2 * S));
  const int64_t row = 2 * 2;  // one q token = Hq * D values
  for (int64_t c = 0; c < row; ++c) {
    EXPECT_EQ(r.o[c], 0.0);
    EXPECT_EQ(r.o[2 * row + c], 0.0);
    EXPECT_EQ(r.grads->dq[c], 0.0);
    EXPECT_EQ(r.grads->dq[2 * row + c], 0.0);
  }
  for (int64_t c = 0; c < 2 * 2; ++c) {  // kv tokens 0, 1 (Hkv * D = 2 each)
    EXPECT_EQ(r.grads->dk[c], 0.0);
    EXPECT_EQ(r.grads->dv[c], 0.0);
  }
  EXPECT_EQ(r.grads->dk[3 * 2], 0.0);  // kv padding
  EXPECT_NE(r.grads->dv[2 * 2], 0.0);  // the attended key
}

// ---------------------------------------------------------------------------
// Documents and errors
// ---------------------------------------------------------------------------

TEST(SmallSeqDocuments, ListsDocumentsInRowMajorOrder) {
  const auto p = problem(batch(side({{0, 1, 3}, {2, 0, 0}}), side({{1, 1, 2, 3, 3, 3}, {0, 2, 2, 2, 2, 0}}),
                               MaskKind::padding, 3),
                         1, 1, 1, false);
  auto d = small_seq_documents(p);
  ASSERT_TRUE(d.ok()) << d.error().message;
  ASSERT_EQ(d->size(), 3u);
  const auto expect_doc = [](const SmallSeqDocument& x, int64_t row, int64_t query, int64_t first,
                             int64_t keys) {
    EXPECT_EQ(x.row, row);
    EXPECT_EQ(x.query, query);
    EXPECT_EQ(x.first_key, first);
    EXPECT_EQ(x.keys, keys);
  };
  expect_doc((*d)[0], 0, 1, 0, 2);
  expect_doc((*d)[1], 0, 2, 3, 3);  // id 2 has keys but no query: not a document
  expect_doc((*d)[2], 1, 0, 1, 4);
}

TEST(SmallSeqDocuments, RejectsMoreThanOneQuery) {
  const auto p = problem(batch(side({{1, 0}, {0, 2}, {3, 3}}), side({{1}, {2}, {3}}),
                               MaskKind::padding, 3),
                         1, 1, 1, false);
  expect_error(small_seq_documents(p), ErrorCode::small_seq_query_count,
               {"row 2", "token 0", "id 3", "2 query tokens"});
  const AttentionInputs in = generate_inputs(p, 1);
  EXPECT_EQ(ref::small_seq(p, in).error().code, ErrorCode::small_seq_query_count);
}

TEST(SmallSeqDocuments, RejectsZeroKeys) {
  // Id 2 has a query but no kv token (a side may lack a document).
  const auto p = problem(batch(side({{1, 2}}), side({{1, 1}}), MaskKind::padding, 2), 1, 1, 1, false);
  expect_error(small_seq_documents(p), ErrorCode::small_seq_key_count,
               {"row 0", "id 2", "0 kv tokens"});
  EXPECT_EQ(ref::small_seq(p, generate_inputs(p, 1)).error().code, ErrorCode::small_seq_key_count);
}

TEST(SmallSeqDocuments, AcceptsSixteenKeysRejectsSeventeen) {
  auto p = problem(batch(side({{1}}), side({Ids(16, 1)}), MaskKind::no_mask, 1), 1, 1, 1, false);
  auto ok = small_seq_documents(p);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)[0].keys, 16);
  p.batch = batch(side({{1}}), side({Ids(17, 1)}), MaskKind::no_mask, 1);
  expect_error(small_seq_documents(p), ErrorCode::small_seq_key_count,
               {"row 0", "id 1", "17 kv tokens"});
}

TEST(SmallSeqDocuments, DocumentsAreCheckedInOrder) {
  // Row 0's second document lacks keys; row 1's document has two queries.
  const auto p = problem(batch(side({{1, 2, 0}, {1, 1, 0}}), side({{1, 1}, {1, 1}}),
                               MaskKind::padding, 2),
                         1, 1, 1, false);
  expect_error(small_seq_documents(p), ErrorCode::small_seq_key_count, {"row 0", "id 2"});
  // Inside one document the query count comes before the key count.
  const auto q = problem(batch(side({{1, 1}}), side({Ids(17, 1)}), MaskKind::no_mask, 1), 1, 1, 1,
                         false);
  expect_error(small_seq_documents(q), ErrorCode::small_seq_query_count);
}

TEST(SmallSeqDocuments, BadHeadsBeforeDocuments) {
  auto p = problem(batch(side({{1, 1}}), side({{1}}), MaskKind::padding, 1), 3, 2, 4, false);
  expect_error(small_seq_documents(p), ErrorCode::bad_heads, {"heads_q = 3"});
  p.shape = AttentionShape{2, 1, 0, std::nullopt, Dtype::fp32, false};
  expect_error(small_seq_documents(p), ErrorCode::bad_heads);
  EXPECT_EQ(ref::small_seq(p, AttentionInputs{}).error().code, ErrorCode::bad_heads);
}

TEST(SmallSeqDocuments, BatchErrorPassesThroughFirst) {
  // Id 2 > M = 1, two queries and bad heads: the batch error wins, unchanged.
  const auto p = problem(batch(side({{1, 1, 2}}), side({{1, 2}}), MaskKind::padding, 1), 3, 2, 4,
                         false);
  const auto expected = validate(p.batch);
  ASSERT_FALSE(expected.ok());
  expect_error(small_seq_documents(p), ErrorCode::too_many_segments);
  EXPECT_EQ(small_seq_documents(p).error().message, expected.error().message);
  EXPECT_EQ(ref::small_seq(p, AttentionInputs{}).error().code, ErrorCode::too_many_segments);
}

TEST(SmallSeqDocuments, TensorShapesCheckedLast) {
  auto p = problem(batch(side({{1, 2}}), side({{1, 2, 2}}), MaskKind::padding, 2), 2, 1, 4, true);
  AttentionInputs in = generate_inputs(p, 4);
  ASSERT_TRUE(small_seq_documents(p, &in).ok());
  in.k.pop_back();
  expect_error(small_seq_documents(p, &in), ErrorCode::bad_tensor_shape, {"k has 11 elements"});
  EXPECT_EQ(ref::small_seq(p, in).error().code, ErrorCode::bad_tensor_shape);
  EXPECT_TRUE(small_seq_documents(p).ok());  // no inputs, no tensor check
  in = generate_inputs(p, 4);
  in.d_o.clear();  // backward without d_o
  EXPECT_EQ(ref::small_seq(p, in).error().code, ErrorCode::bad_tensor_shape);
  // A document error wins over a tensor error.
  p.batch = batch(side({{1, 1}}), side({{1, 2, 2}}), MaskKind::padding, 2);
  expect_error(small_seq_documents(p, &in), ErrorCode::small_seq_query_count);
}

// ---------------------------------------------------------------------------
// Agreement with the dense reference, P rows, finite differences
// ---------------------------------------------------------------------------

// Small-seq problems covering the mask kinds, windows, rows, extra dims and GQA.
std::vector<AttentionProblem> small_seq_problems() {
  std::vector<AttentionProblem> out;
  // Padding on both sides, two rows, a kv document with no query, up to 16 keys.
  Ids long_row(20, 0);
  for (int t = 0; t < 16; ++t) long_row[t] = 2;
  long_row[16] = 3;
  out.push_back(problem(batch(side({{1, 0, 2, 3, 0}, {0, 2, 0, 0, 0}}),
                               side({{1, 1, 1, 0, 2, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                                     long_row}),
                               MaskKind::padding, 3),
                         2, 2, 4, true));
  // GQA 6 / 2, window on both sides with positions that do not start at 0.
  out.push_back(problem(batch(side({{1, 2, 3}}, {{4, 2, 9}}),
                               side({{1, 1, 1, 1, 2, 2, 3, 3, 3}}, {{1, 3, 4, 5, 0, 7, 8, 9, 12}}),
                               MaskKind::padding, 3, Window{1, 1}),
                         6, 2, 3, true));
  // Causal top-left: keys after the query's position are masked.
  out.push_back(problem(batch(side({{1, 2}, {1, 2}}, {{2, 0}, {5, 1}}),
                               side({{1, 1, 1, 1, 2, 2}, {1, 2, 2, 2, 2, 2}},
                                    {{0, 1, 2, 3, 0, 1}, {6, 0, 1, 2, 3, 4}}),
                               MaskKind::causal, 2),
                         4, 1, 2, true));
  // padding_causal with a window (left 1, right 0).
  out.push_back(problem(batch(side({{0, 1, 2}}, {{0, 3, 2}}),
                               side({{1, 1, 1, 1, 0, 2, 2, 2}}, {{0, 1, 2, 3, 0, 0, 1, 2}}),
                               MaskKind::padding_causal, 2, Window{1, 0}),
                         2, 1, 5, true));
  // Bottom-right: the single query sits at the end; window left 1 keeps 2 keys.
  out.push_back(problem(batch(side({{1, 2, 3}}), side({{1, 1, 1, 2, 3, 3, 3, 3}}),
                               MaskKind::causal_bottom_right, 3, Window{1, 7}),
                         2, 2, 3, true));
  out.push_back(problem(batch(side({{0, 1, 2}}, {{0, 4, 0}}),
                               side({{1, 1, 1, 2, 2, 0}}, {{3, 5, 6, 0, 2, 0}}),
                               MaskKind::padding_causal_bottom_right, 2),
                         3, 1, 2, true));
  // Extra dims: q ids [2, 2, T] (positions [2, T] broadcast), kv [2, T] broadcast.
  PackedSide q{IntArray({2, 2, 3}, {1, 2, 0, 0, 1, 0, 0, 0, 2, 1, 0, 3}),
               IntArray({2, 3}, {0, 0, 0, 0, 0, 0})};
  PackedSide kv{IntArray({2, 4}, {1, 2, 2, 0, 1, 1, 2, 3}), IntArray({2, 4}, {0, 0, 1, 0, 0, 1, 0, 0})};
  out.push_back(problem(batch(q, kv, MaskKind::padding, 3), 2, 1, 3, true));
  return out;
}

TEST(SmallSeqReference, MatchesDenseMaskedReference) {
  int64_t index = 0;
  for (const AttentionProblem& p : small_seq_problems()) {
    SCOPED_TRACE("problem " + std::to_string(index++));
    ASSERT_TRUE(small_seq_documents(p).ok()) << small_seq_documents(p).error().message;
    const AttentionInputs in = generate_inputs(p, 100 + index);
    const SmallSeqResult s = run(p, in);
    auto dense = ref::attention_dense_masked(p, in);
    ASSERT_TRUE(dense.ok()) << dense.error().message;
    expect_close(s.o, dense->o, "o");
    ASSERT_TRUE(s.grads && dense->grads);
    expect_close(s.grads->dq, dense->grads->dq, "dq");
    expect_close(s.grads->dk, dense->grads->dk, "dk");
    expect_close(s.grads->dv, dense->grads->dv, "dv");
    // P against exp(s - lse) of the dense reference, slot by slot.
    const auto docs = small_seq_documents(p).value();
    const BatchLayout layout = validate(p.batch).value();
    const int64_t Hq = p.shape.heads_q, Hkv = p.shape.heads_kv, D = p.shape.head_dim;
    const double scale = p.shape.effective_scale();
    for (size_t n = 0; n < docs.size(); ++n) {
      const SmallSeqDocument& d = docs[n];
      const ref::RowMask mask = ref::explicit_mask(p.batch, layout, d.row, true);
      for (int64_t h = 0; h < Hq; ++h) {
        const double lse = dense->lse[(d.row * Hq + h) * layout.q_len + d.query];
        for (int64_t j = 0; j < S; ++j) {
          double expected = 0.0;
          if (j < d.keys && mask(d.query, d.first_key + j)) {
            double dot = 0.0;
            const int64_t qt = d.row * layout.q_len + d.query;
            const int64_t kt = d.row * layout.kv_len + d.first_key + j;
            for (int64_t c = 0; c < D; ++c)
              dot += in.q[(qt * Hq + h) * D + c] * in.k[(kt * Hkv + h / (Hq / Hkv)) * D + c];
            expected = std::exp(scale * dot - lse);
          }
          EXPECT_NEAR(s.p[(n * Hq + h) * S + j], expected, 1e-12) << n << " " << h << " " << j;
        }
      }
    }
  }
}

TEST(SmallSeqReference, PRowsSumToOneOverAllowedKeys) {
  int64_t index = 0, empty_rows = 0;
  for (const AttentionProblem& p : small_seq_problems()) {
    SCOPED_TRACE("problem " + std::to_string(index++));
    const AttentionInputs in = generate_inputs(p, 7 * index);
    const SmallSeqResult r = run(p, in);
    const auto docs = small_seq_documents(p).value();
    const BatchLayout layout = validate(p.batch).value();
    const int64_t Hq = p.shape.heads_q;
    ASSERT_EQ(r.p.size(), docs.size() * Hq * S);
    for (size_t n = 0; n < docs.size(); ++n) {
      const SmallSeqDocument& d = docs[n];
      const ref::RowMask mask = ref::explicit_mask(p.batch, layout, d.row, true);
      bool any = false;
      for (int64_t j = 0; j < d.keys; ++j) any = any || mask(d.query, d.first_key + j);
      empty_rows += any ? 0 : 1;
      for (int64_t h = 0; h < Hq; ++h) {
        const std::vector<double> row = p_row(r, n, Hq, h);
        double sum = 0.0;
        for (int64_t j = 0; j < S; ++j) {
          const bool allowed = j < d.keys && mask(d.query, d.first_key + j);
          if (!allowed) {
            EXPECT_EQ(row[j], 0.0) << n << " " << h << " " << j;
          }
          EXPECT_GE(row[j], 0.0);
          sum += row[j];
        }
        EXPECT_NEAR(sum, any ? 1.0 : 0.0, 1e-14) << n << " " << h;
      }
    }
  }
  EXPECT_GT(empty_rows, 0);  // the problems include fully masked queries
}

TEST(SmallSeqReference, BackwardMatchesFiniteDifferences) {
  // GQA 2 / 1, a window masking one key of document 1, two documents.
  const auto p = problem(batch(side({{1, 2}}, {{2, 0}}), side({{1, 1, 1, 2, 2}}, {{0, 1, 2, 0, 1}}),
                               MaskKind::padding, 2, Window{1, -1}),
                         2, 1, 3, true);
  AttentionInputs in = generate_inputs(p, 21);
  const SmallSeqResult r = run(p, in);
  const auto loss = [&](const AttentionInputs& x) {
    const SmallSeqResult y = run(p, x);
    double l = 0.0;
    for (size_t i = 0; i < y.o.size(); ++i) l += y.o[i] * x.d_o[i];
    return l;
  };
  const double step = 1e-6;
  const auto check = [&](std::vector<double> AttentionInputs::*tensor,
                         const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < grad.size(); ++i) {
      AttentionInputs plus = in, minus = in;
      (plus.*tensor)[i] += step;
      (minus.*tensor)[i] -= step;
      const double fd = (loss(plus) - loss(minus)) / (2 * step);
      EXPECT_LE(std::fabs(fd - grad[i]), 1e-6 * std::max(1.0, std::fabs(grad[i])))
          << name << "[" << i << "]: fd " << fd << " vs " << grad[i];
    }
  };
  check(&AttentionInputs::q, r.grads->dq, "dq");
  check(&AttentionInputs::k, r.grads->dk, "dk");
  check(&AttentionInputs::v, r.grads->dv, "dv");
  EXPECT_EQ(p_row(r, 0, 2, 0)[0], 0.0);  // the window did mask key 0 of document 1
}

}  // namespace
}  // namespace attn_oracle
