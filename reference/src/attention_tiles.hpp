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

// One tile of m queries against the n keys `k`, `v` ([n, D]). In: scratch.q
// (and with backward scratch.d_o) rows 0..m-1, scratch.allowed [m, n]. Out: the
// o rows in scratch.o, lse[0..m-1], with backward the dq rows in scratch.dq and
// dK, dV added into `dk`, `dv` ([n, D]).
void attend_tile(Scratch& scratch, int64_t m, const ConstRef& k, const ConstRef& v, double scale, bool backward,
                 double* lse, Ref dk, Ref dv);

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
