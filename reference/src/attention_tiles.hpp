// attention_tiles.hpp (internal to attn_oracle_reference): the float64 block
// arithmetic both references run on a query tile, and the deterministic worker
// loop they share out their units with.
//
// A tile is up to kReferenceTileRows queries of one head against n gathered keys
// of its kv head, with an [m, n] flag block saying which pairs are attended
// (the caller fills it: the dense reference from the explicit mask, the
// per-document one from the kernels' index rule). Forward and backward run on
// the tile at once, reusing P:
//   S = scale Q K^T;  P = softmax over the attended entries of each row (minus
//   the row's maximum), lse = max + log(sum);  O = P V;
//   dP = dO V^T;  dS = P * (dP - rowsum(P * dP));  dQ = scale dS K;
//   dK += scale dS^T Q;  dV += P^T dO.
// A row that attends nothing gets P = 0, o = 0, lse = -inf and dq = 0 (never a
// division by a zero sum); a key no row attends gets a zero column of P and dS,
// so nothing is added to its dK, dV.
//
// Determinism: every sum has a fixed order given the sizes (Eigen's products
// with EIGEN_DONT_PARALLELIZE, the softmax loops left to right), the tile's
// operands are owned, aligned copies, and a unit of work is done by one thread
// from start to end, so results are bitwise the same run to run and for any
// thread count.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "attn_oracle/model/attention.hpp"

namespace attn_oracle::ref::tiles {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Flags = Eigen::Matrix<char, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Ref = Eigen::Ref<Matrix, 0, Eigen::OuterStride<>>;
using ConstRef = Eigen::Ref<const Matrix, 0, Eigen::OuterStride<>>;
using StridedMap = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
using ConstStridedMap = Eigen::Map<const Matrix, 0, Eigen::OuterStride<>>;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kTileRows = kReferenceTileRows;

// Tokens [first, first + count) of head `head` of a [tokens, heads, dim] tensor,
// as a [count, dim] matrix (rows strided by heads * dim). An empty block points
// at the start: the tensor may be empty.
ConstStridedMap head_rows(const std::vector<double>& t, int64_t first, int64_t count, int64_t heads, int64_t head,
                          int64_t dim);
StridedMap head_rows(std::vector<double>& t, int64_t first, int64_t count, int64_t heads, int64_t head, int64_t dim);

// One worker's buffers, sized once for the largest tile of a call and reused.
struct Scratch {
  Matrix p, ds;                 // [tile, max keys]: P, then dP and dS in place
  Flags allowed;                // [tile, max keys]
  Matrix q, o, d_o, dq;         // [tile, D]
  Eigen::VectorXd delta;        // [tile]
  Scratch(int64_t tile_rows, int64_t max_keys, int64_t dim);
};

// The steps of the tile arithmetic that a planted fault replaces: the masked
// softmax (P and lse from the scores), O = P V and delta = rowsum(P * dP). The
// tile code is a template over them so that tests/planted/tile_faults.cpp can
// build the references a second time with one step wrong and see
// attention/oracleArithmeticMatchesScalarLoops catch it; the library builds them
// with these steps only, so it holds no fault (ctest reference_has_no_faults).
struct ExactTile {
  // P [m, n] from the scores in place: the softmax of each row over its attended
  // entries, 0 elsewhere. Writes per row lse, -inf where nothing is attended.
  static void masked_softmax(Eigen::Block<Matrix> p, const Eigen::Block<Flags>& allowed, double scale, double* lse) {
    for (int64_t i = 0; i < p.rows(); ++i) {
      double row_max = kNegInf;
      bool any = false;
      for (int64_t j = 0; j < p.cols(); ++j)
        if (allowed(i, j)) {
          any = true;
          row_max = std::max(row_max, p(i, j) *= scale);
        }
      if (!any) {
        p.row(i).setZero();
        lse[i] = kNegInf;
        continue;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < p.cols(); ++j) {
        if (allowed(i, j)) sum += p(i, j) = std::exp(p(i, j) - row_max);
        else p(i, j) = 0.0;
      }
      for (int64_t j = 0; j < p.cols(); ++j) p(i, j) /= sum;
      lse[i] = row_max + std::log(sum);
    }
  }
  template <class P, class V, class O>
  static void output(const P& p, const V& v, O& o) {
    o.noalias() = p * v;
  }
  template <class P, class DP, class Delta>
  static void delta(const P& p, const DP& dp, Delta& out) {
    out = p.cwiseProduct(dp).rowwise().sum();
  }
};

// One tile of m queries against the n keys `k`, `v` ([n, D]). In: scratch.q
// (and with backward scratch.d_o) rows 0..m-1, scratch.allowed [m, n]. Out: the
// o rows in scratch.o, lse[0..m-1], with backward the dq rows in scratch.dq and
// dK, dV added into `dk`, `dv` ([n, D]).
template <class Steps>
void attend_tile(Scratch& s, int64_t m, const ConstRef& k, const ConstRef& v, double scale, bool backward,
                 double* lse, Ref dk, Ref dv) {
  const int64_t n = k.rows();
  auto p = s.p.topLeftCorner(m, n);
  const auto q = s.q.topRows(m);
  auto o = s.o.topRows(m);
  p.noalias() = q * k.transpose();
  Steps::masked_softmax(p, s.allowed.topLeftCorner(m, n), scale, lse);
  Steps::output(p, v, o);
  // Rows that attend nothing are +0 exactly (a product of zeros may round to -0).
  for (int64_t i = 0; i < m; ++i)
    if (lse[i] == kNegInf) o.row(i).setZero();
  if (!backward) return;
  const auto d_o = s.d_o.topRows(m);
  auto ds = s.ds.topLeftCorner(m, n);
  auto dq = s.dq.topRows(m);
  auto delta = s.delta.head(m);
  ds.noalias() = d_o * v.transpose();  // dP
  // delta = rowsum(P * dP), which is rowsum(dO * O) in exact arithmetic; summed
  // from dP itself, a row with one attended key (P = 1) gets dS = 0 exactly
  // instead of the rounding noise of two differently ordered dot products.
  Steps::delta(p, ds, delta);
  ds = p.cwiseProduct(ds.colwise() - delta);  // dS, 0 where P is
  dq.noalias() = scale * (ds * k);
  dk.noalias() += scale * (ds.transpose() * q);
  dv.noalias() += p.transpose() * d_o;
  for (int64_t i = 0; i < m; ++i)
    if (lse[i] == kNegInf) dq.row(i).setZero();
}

// Multiply-adds of one head-dim wide score or output element over every
// (query, key) pair of every row and query head: an upper bound of a call's work.
double work_of(const AttentionSizes& z);
// Units of the dense reference in one row at most: (group of query tiles, kv head).
int64_t dense_units(const AttentionSizes& z);
// The worker count: reference_threads() (ATTN_ORACLE_THREADS, set_reference_threads,
// else the cores), at most `units`; one when the work is too small to be worth a
// thread (kSerialWork). The memory check charges no fewer (attention_problem.cpp).
inline constexpr double kSerialWork = double(1 << 21);
int64_t workers_for(int64_t units, double work);

// Runs work(unit, worker) for unit = 0 .. units - 1 on `workers` threads (the
// caller's included); each unit runs start to end on one thread. An exception
// from any unit is rethrown here after every thread has stopped.
//
// Plain std::thread and an atomic unit counter rather than OpenMP or a pool: the
// units are few and coarse (a document or a group of query tiles of one kv
// head, milliseconds to seconds), so starting threads per call costs nothing
// that shows; the library stays free of a runtime that would have to agree with
// the Python extension's and a vendoring project's, and runs under the
// sanitizers as it is. Which thread takes a unit never matters: a unit's sums
// are its own, in a fixed order.
void for_each_unit(int64_t units, int64_t workers, const std::function<void(int64_t unit, int64_t worker)>& work);

}  // namespace attn_oracle::ref::tiles
