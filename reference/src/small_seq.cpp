// small_seq.cpp: the float64 reference of the small-sequence problem
// (docs/semantics.md#8-small-sequence-problems): one query token per document, 1..16 keys, P =
// softmax(S) stored [docs, Hq, 16] instead of the log-sum-exp, backward from P.
//
// Semantics that are easy to get wrong:
//  - documents are the q runs of broadcast rows, in row-major order over the rows
//    and then by position in the row; a kv document with no query is no document
//    (its kv tokens get dk = dv = 0) and takes no P slot.
//  - slot j of a P row is the document's j-th kv token *in row order*, whether or
//    not the mask allows it: masked slots and slots past the keys are exactly 0,
//    so a P row sums to 1 over its allowed keys, or is all 0.
//  - the mask is the explicit mask of docs/semantics.md#2-the-attention-mask, window included: causal
//    kinds compare positions (top-left) or run-length offsets (bottom-right, with
//    the query's run of length 1), so a window or causality can mask every key.
//    Such a query gets o = 0, a zero P row and dq = 0, never a division by 0.
//  - scale defaults to 1/sqrt(head_dim); query head h reads kv head h / (Hq / Hkv),
//    so dk and dv accumulate over the Hq / Hkv query heads sharing a kv head.
//  - validation order: batch, heads, then documents in order (query count, then
//    key count of each), then tensor sizes: a shape error in q cannot hide a
//    small-seq violation.
//
// Tested by tests/small_seq_reference_test.cpp: hand-computed cases (one key,
// equal keys, a window masking a key, all keys masked, GQA), every error path,
// P rows summing to 1, agreement with ref::attention_dense_masked on o, dq, dk,
// dv at 1e-12 relative, and the backward against central finite differences.
#include "attn_oracle/reference/small_seq.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::ref {
namespace {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using KeyMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
using ConstKeyMap = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using VecMap = Eigen::Map<Eigen::VectorXd>;
using ConstVecMap = Eigen::Map<const Eigen::VectorXd>;
using Slots = Eigen::Matrix<double, Eigen::Dynamic, 1, 0, kSmallSeqMaxKeys, 1>;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Per-document attention
// ---------------------------------------------------------------------------

// One document, one query head. allowed[j] says whether key j is attended.
// Writes o [D] and P [16] (zeros where masked and past the keys); returns false
// when no key is allowed (o and P stay 0).
bool small_seq_fwd(const ConstVecMap& q, const ConstKeyMap& k, const ConstKeyMap& v,
                   const bool* allowed, double scale, VecMap o, double* p) {
  const int64_t keys = k.rows();
  const Slots s = scale * (k * q);
  double row_max = kNegInf;
  for (int64_t j = 0; j < keys; ++j)
    if (allowed[j]) row_max = std::max(row_max, s(j));
  if (row_max == kNegInf) return false;
  double sum = 0.0;
  for (int64_t j = 0; j < keys; ++j)
    if (allowed[j]) sum += p[j] = std::exp(s(j) - row_max);
  for (int64_t j = 0; j < keys; ++j) p[j] /= sum;
  o.noalias() = v.transpose() * Eigen::Map<const Eigen::VectorXd>(p, keys);
  return true;
}

// One document, one query head, from P: dq written, dk and dv accumulated.
void small_seq_bwd(const double* p_slots, const ConstVecMap& q, const ConstKeyMap& k,
                   const ConstKeyMap& v, const ConstVecMap& d_o, double scale, VecMap dq,
                   KeyMap dk, KeyMap dv) {
  const int64_t keys = k.rows();
  const ConstVecMap p(p_slots, keys);
  const Slots dp = v * d_o;                              // dP = dO V^T
  const double delta = p.dot(dp);                        // sum(P dP)
  const Slots ds = p.cwiseProduct((dp.array() - delta).matrix());
  dq.noalias() = scale * (k.transpose() * ds);
  dk.noalias() += scale * (ds * q.transpose());
  dv.noalias() += p * d_o.transpose();
}

}  // namespace

Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& in) {
  auto listed = small_seq_documents(problem, &in);
  if (!listed) return listed.error();
  const std::vector<SmallSeqDocument>& docs = listed.value();
  const BatchLayout layout = validate_shapes(problem.batch).value();
  const AttentionSizes z = validate_attention(problem).value();
  const AttentionShape& shape = problem.shape;
  const double scale = shape.effective_scale();
  const int64_t Hq = z.heads_q, Hkv = z.heads_kv, D = z.head_dim, Tq = z.q_len, Tkv = z.kv_len;
  const int64_t group = Hq / Hkv, S = kSmallSeqMaxKeys;

  SmallSeqResult out;
  out.o.assign(z.q_elems(), 0.0);
  out.p.assign(docs.size() * Hq * S, 0.0);
  if (shape.backward)
    out.grads = AttentionGradients{std::vector<double>(z.q_elems(), 0.0),
                                   std::vector<double>(z.kv_elems(), 0.0),
                                   std::vector<double>(z.kv_elems(), 0.0)};

  ref::RowMask mask;
  int64_t mask_row = -1;
  for (size_t n = 0; n < docs.size(); ++n) {
    const SmallSeqDocument& d = docs[n];
    if (d.row != mask_row) {
      mask = explicit_mask(problem.batch, layout, d.row, /*with_window=*/true);
      mask_row = d.row;
    }
    bool allowed[kSmallSeqMaxKeys] = {};
    for (int64_t j = 0; j < d.keys; ++j) allowed[j] = mask(d.query, d.first_key + j);
    const int64_t qt = d.row * Tq + d.query, kt = d.row * Tkv + d.first_key;

    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / group;
      const int64_t q_at = (qt * Hq + h) * D, kv_at = (kt * Hkv + g) * D;
      const ConstVecMap q(in.q.data() + q_at, D);
      const ConstKeyMap k(in.k.data() + kv_at, d.keys, D, Eigen::OuterStride<>(Hkv * D));
      const ConstKeyMap v(in.v.data() + kv_at, d.keys, D, Eigen::OuterStride<>(Hkv * D));
      double* p = out.p.data() + (n * Hq + h) * S;
      if (!small_seq_fwd(q, k, v, allowed, scale, VecMap(out.o.data() + q_at, D), p)) continue;
      if (!shape.backward) continue;
      AttentionGradients& gr = *out.grads;
      small_seq_bwd(p, q, k, v, ConstVecMap(in.d_o.data() + q_at, D), scale,
                    VecMap(gr.dq.data() + q_at, D),
                    KeyMap(gr.dk.data() + kv_at, d.keys, D, Eigen::OuterStride<>(Hkv * D)),
                    KeyMap(gr.dv.data() + kv_at, d.keys, D, Eigen::OuterStride<>(Hkv * D)));
    }
  }
  return out;
}

}  // namespace attn_oracle::ref
