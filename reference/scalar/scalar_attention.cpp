// scalar_attention.cpp: the float64 attention references as they were before
// they ran on query tiles (reference/src/reference_attention.cpp), kept
// unchanged as an independent cross-check: the suite's property
// attention/oracleArithmeticMatchesScalarLoops (properties/src/oracle_arithmetic_properties.cpp)
// compares the oracle's arithmetic with these loops on every run, the tests do
// (tests/reference_tiles_test.cpp), and the attention benchmark measures against them.
//
//  - Dense masked: every broadcast row against its explicit [Tq, Tkv] mask of
//    docs/semantics.md#2-the-attention-mask (ids and positions, window included), in matrix form over the
//    whole row: S = scale Q K^T, P = masked softmax(S), O = P V; backward from
//    the stored P. Memory: ScoreMemory::dense_row.
//  - Per document: every compacted document of the metadata (cu_seqlens,
//    ragged_offsets) with the kernels' index rule on its trimmed runs, in scalar
//    loops per query token (three dot products per attended pair); backward
//    recomputes P from the log-sum-exp, as the fused kernels do.
#include "scalar_attention.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::ref::scalar {
namespace {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using HeadMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
using ConstHeadMap = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Tokens [first, first + count) of head `head` of a [tokens, heads, D] tensor,
// as a [count, D] matrix (rows strided by heads * D).
// An empty block (a side with T = 0) points at the start: the tensor may be empty.
ConstHeadMap head_block(const std::vector<double>& t, int64_t first, int64_t count,
                        int64_t heads, int64_t head, int64_t dim) {
  const int64_t at = count == 0 ? 0 : (first * heads + head) * dim;
  return ConstHeadMap(t.data() + at, count, dim, Eigen::OuterStride<>(heads * dim));
}
HeadMap head_block(std::vector<double>& t, int64_t first, int64_t count, int64_t heads,
                   int64_t head, int64_t dim) {
  const int64_t at = count == 0 ? 0 : (first * heads + head) * dim;
  return HeadMap(t.data() + at, count, dim, Eigen::OuterStride<>(heads * dim));
}

// Outputs before anything is attended: o = 0, lse = -inf, gradients 0.
AttentionResult empty_result(const AttentionSizes& z, bool backward) {
  AttentionResult r;
  r.o.assign(z.q_elems(), 0.0);
  r.lse.assign(z.lse_elems(), kNegInf);
  if (backward)
    r.grads = AttentionGradients{std::vector<double>(z.q_elems(), 0.0),
                                 std::vector<double>(z.kv_elems(), 0.0),
                                 std::vector<double>(z.kv_elems(), 0.0)};
  return r;
}

// ---------------------------------------------------------------------------
// Dense masked attention
// ---------------------------------------------------------------------------

// One (row, query head): writes O [Tq, D] and lse [Tq]; returns P [Tq, Tkv]
// (zero outside the mask and on rows that attend nothing).
RowMajor attention_fwd_dense_masked(const ConstHeadMap& q, const ConstHeadMap& k,
                                    const ConstHeadMap& v, const RowMask& mask, double scale,
                                    HeadMap o, double* lse) {
  const RowMajor s = scale * (q * k.transpose());
  RowMajor p = RowMajor::Zero(mask.q_len, mask.kv_len);
  for (int64_t i = 0; i < mask.q_len; ++i) {
    bool any = false;
    double row_max = kNegInf;
    for (int64_t j = 0; j < mask.kv_len; ++j)
      if (mask(i, j)) {
        any = true;
        row_max = std::max(row_max, s(i, j));
      }
    if (!any) {
      lse[i] = kNegInf;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < mask.kv_len; ++j)
      if (mask(i, j)) sum += p(i, j) = std::exp(s(i, j) - row_max);
    p.row(i) /= sum;
    lse[i] = row_max + std::log(sum);
  }
  o.noalias() = p * v;
  return p;
}

// One (row, query head): dQ for this head, dK and dV accumulated into the kv head.
void attention_bwd_dense_masked(const RowMajor& p, const ConstHeadMap& q, const ConstHeadMap& k,
                                const ConstHeadMap& v, const ConstHeadMap& o,
                                const ConstHeadMap& d_o, double scale, HeadMap dq, HeadMap dk,
                                HeadMap dv) {
  const RowMajor dp = d_o * v.transpose();                            // [Tq, Tkv]
  const Eigen::VectorXd delta = d_o.cwiseProduct(o).rowwise().sum();  // [Tq], rowsum(dO * O)
  const RowMajor ds = p.cwiseProduct(dp.colwise() - delta);           // [Tq, Tkv]
  dq.noalias() = scale * (ds * k);
  dk.noalias() += scale * (ds.transpose() * q);
  dv.noalias() += p.transpose() * d_o;
}

// The contract has no NaN and no infinity but lse's -inf. Validation bounds the
// magnitudes (value_overflow), so this is a guard: a result that breaks it is
// refused with the first bad element rather than handed out.
Expected<AttentionResult> finite_or_error(AttentionResult out) {
  auto bad = [](const char* name, const std::vector<double>& t, bool lse) -> std::optional<Error> {
    for (size_t i = 0; i < t.size(); ++i)
      if (std::isnan(t[i]) || (std::isinf(t[i]) && !(lse && t[i] < 0)))
        return Error{ErrorCode::value_overflow, std::string("the float64 reference overflowed: ") + name + "[" +
                                                    std::to_string(i) + "] = " + std::to_string(t[i])};
    return std::nullopt;
  };
  if (auto e = bad("o", out.o, false)) return *e;
  if (auto e = bad("lse", out.lse, true)) return *e;
  if (out.grads)
    for (auto [name, t] : {std::pair{"dq", &out.grads->dq}, std::pair{"dk", &out.grads->dk}, std::pair{"dv", &out.grads->dv}})
      if (auto e = bad(name, *t, false)) return *e;
  return out;
}

}  // namespace

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem,
                                                 const AttentionInputs& in) {
  auto sizes = validate_attention(problem, &in);
  if (!sizes) return sizes.error();
  const AttentionSizes& z = sizes.value();
  const BatchLayout layout = validate_shapes(problem.batch).value();
  const AttentionShape& shape = problem.shape;
  const double scale = shape.effective_scale();
  const int64_t group = z.heads_q / z.heads_kv, D = z.head_dim, Tq = z.q_len, Tkv = z.kv_len;
  AttentionResult out = empty_result(z, shape.backward);
  for (int64_t r = 0; r < z.rows; ++r) {
    const RowMask mask = explicit_mask(problem.batch, layout, r, /*with_window=*/true);
    for (int64_t h = 0; h < z.heads_q; ++h) {
      const int64_t g = h / group;
      const auto q = head_block(in.q, r * Tq, Tq, z.heads_q, h, D);
      const auto k = head_block(in.k, r * Tkv, Tkv, z.heads_kv, g, D);
      const auto v = head_block(in.v, r * Tkv, Tkv, z.heads_kv, g, D);
      double* lse = out.lse.data() + (r * z.heads_q + h) * Tq;
      const RowMajor p = attention_fwd_dense_masked(
          q, k, v, mask, scale, head_block(out.o, r * Tq, Tq, z.heads_q, h, D), lse);
      if (!shape.backward) continue;
      AttentionGradients& gr = *out.grads;
      const auto o = head_block(std::as_const(out.o), r * Tq, Tq, z.heads_q, h, D);
      attention_bwd_dense_masked(p, q, k, v, o, head_block(in.d_o, r * Tq, Tq, z.heads_q, h, D),
                                 scale, head_block(gr.dq, r * Tq, Tq, z.heads_q, h, D),
                                 head_block(gr.dk, r * Tkv, Tkv, z.heads_kv, g, D),
                                 head_block(gr.dv, r * Tkv, Tkv, z.heads_kv, g, D));
    }
  }
  return finite_or_error(std::move(out));
}

// ---------------------------------------------------------------------------
// Per-document attention
// ---------------------------------------------------------------------------

namespace {

// One compacted document: global (THD) token index of its first q / kv token
// and the lengths of its trimmed runs.
struct DocRuns {
  int64_t q0 = 0, lq = 0, kv0 = 0, lkv = 0;
};

// One document, one query head, scalar loops per query token. Writes O rows
// and lse entries; queries the rule leaves with no key keep o = 0, lse = -inf.
void attention_fwd_per_document(const DocRuns& d, const PackedBatch& b, double scale,
                                const ConstHeadMap& q, const ConstHeadMap& k,
                                const ConstHeadMap& v, HeadMap o, double* lse) {
  for (int64_t a = 0; a < d.lq; ++a) {
    double row_max = kNegInf;
    int64_t attended = 0;
    for (int64_t j = 0; j < d.lkv; ++j) {
      if (!kernel_rule_allows(b.mask, b.window, a, j, d.lq, d.lkv)) continue;
      row_max = std::max(row_max, scale * q.row(a).dot(k.row(j)));
      ++attended;
    }
    if (attended == 0) continue;
    double denominator = 0.0;
    for (int64_t j = 0; j < d.lkv; ++j)
      if (kernel_rule_allows(b.mask, b.window, a, j, d.lq, d.lkv))
        denominator += std::exp(scale * q.row(a).dot(k.row(j)) - row_max);
    for (int64_t j = 0; j < d.lkv; ++j) {
      if (!kernel_rule_allows(b.mask, b.window, a, j, d.lq, d.lkv)) continue;
      const double p = std::exp(scale * q.row(a).dot(k.row(j)) - row_max) / denominator;
      for (int64_t c = 0; c < o.cols(); ++c) o(a, c) += p * v(j, c);
    }
    lse[a] = row_max + std::log(denominator);
  }
}

// One document, one query head: P recomputed from lse; dQ rows written, dK and
// dV rows accumulated into the kv head.
void attention_bwd_per_document(const DocRuns& d, const PackedBatch& b, double scale,
                                const ConstHeadMap& q, const ConstHeadMap& k,
                                const ConstHeadMap& v, const ConstHeadMap& o,
                                const ConstHeadMap& d_o, const double* lse, HeadMap dq,
                                HeadMap dk, HeadMap dv) {
  for (int64_t a = 0; a < d.lq; ++a) {
    if (lse[a] == kNegInf) continue;
    const double delta = d_o.row(a).dot(o.row(a));
    for (int64_t j = 0; j < d.lkv; ++j) {
      if (!kernel_rule_allows(b.mask, b.window, a, j, d.lq, d.lkv)) continue;
      const double p = std::exp(scale * q.row(a).dot(k.row(j)) - lse[a]);
      const double ds = p * (d_o.row(a).dot(v.row(j)) - delta);
      for (int64_t c = 0; c < q.cols(); ++c) {
        dq(a, c) += scale * ds * k(j, c);
        dk(j, c) += scale * ds * q(a, c);
        dv(j, c) += p * d_o(a, c);
      }
    }
  }
}

}  // namespace

Expected<AttentionResult> attention_per_document(const AttentionProblem& problem,
                                                 const AttentionInputs& in) {
  auto sizes = validate_attention(problem, &in, ScoreMemory::streaming);
  if (!sizes) return sizes.error();
  auto md = metadata(problem.batch);
  if (!md) return md.error();
  const AttentionSizes& z = sizes.value();
  const AttentionShape& shape = problem.shape;
  const double scale = shape.effective_scale();
  const int64_t Hq = z.heads_q, Hkv = z.heads_kv, D = z.head_dim, Tq = z.q_len;
  AttentionResult out = empty_result(z, shape.backward);
  for (int64_t s = 0; s < md->documents(); ++s) {
    const DocRuns d{md->ragged_offsets_q[s], md->cu_seqlens_q[s + 1] - md->cu_seqlens_q[s],
                    md->ragged_offsets_kv[s], md->cu_seqlens_kv[s + 1] - md->cu_seqlens_kv[s]};
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      // lse is [R, Hq, Tq]; a document's q run lies inside one row, so its
      // entries are contiguous from token q0 = row * Tq + start.
      double* lse = &out.lse[((d.q0 / Tq) * Hq + h) * Tq + d.q0 % Tq];
      const auto q = head_block(in.q, d.q0, d.lq, Hq, h, D);
      const auto k = head_block(in.k, d.kv0, d.lkv, Hkv, g, D);
      const auto v = head_block(in.v, d.kv0, d.lkv, Hkv, g, D);
      attention_fwd_per_document(d, problem.batch, scale, q, k, v,
                                 head_block(out.o, d.q0, d.lq, Hq, h, D), lse);
      if (!shape.backward) continue;
      AttentionGradients& gr = *out.grads;
      attention_bwd_per_document(d, problem.batch, scale, q, k, v,
                                 head_block(std::as_const(out.o), d.q0, d.lq, Hq, h, D),
                                 head_block(in.d_o, d.q0, d.lq, Hq, h, D), lse,
                                 head_block(gr.dq, d.q0, d.lq, Hq, h, D),
                                 head_block(gr.dk, d.kv0, d.lkv, Hkv, g, D),
                                 head_block(gr.dv, d.kv0, d.lkv, Hkv, g, D));
    }
  }
  return finite_or_error(std::move(out));
}

}  // namespace attn_oracle::ref::scalar
