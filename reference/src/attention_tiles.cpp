// attention_tiles.cpp: see attention_tiles.hpp.
#include "attention_tiles.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/reference/tile_faults.hpp"

namespace attn_oracle::ref {
namespace {
std::atomic<TileFault> planted{TileFault::none};
}  // namespace

TileFault planted_tile_fault() { return planted.load(std::memory_order_relaxed); }
ScopedTileFault::ScopedTileFault(TileFault fault) : previous_(planted.exchange(fault)) {}
ScopedTileFault::~ScopedTileFault() { planted.store(previous_); }

}  // namespace attn_oracle::ref

namespace attn_oracle::ref::tiles {

ConstStridedMap head_rows(const std::vector<double>& t, int64_t first, int64_t count, int64_t heads, int64_t head,
                          int64_t dim) {
  const int64_t at = count == 0 ? 0 : (first * heads + head) * dim;
  return ConstStridedMap(t.data() + at, count, dim, Eigen::OuterStride<>(heads * dim));
}

StridedMap head_rows(std::vector<double>& t, int64_t first, int64_t count, int64_t heads, int64_t head, int64_t dim) {
  const int64_t at = count == 0 ? 0 : (first * heads + head) * dim;
  return StridedMap(t.data() + at, count, dim, Eigen::OuterStride<>(heads * dim));
}

Scratch::Scratch(int64_t tile_rows, int64_t max_keys, int64_t dim)
    : p(tile_rows, max_keys),
      ds(tile_rows, max_keys),
      allowed(tile_rows, max_keys),
      q(tile_rows, dim),
      o(tile_rows, dim),
      d_o(tile_rows, dim),
      dq(tile_rows, dim),
      delta(tile_rows) {}

namespace {

// P [m, n] from the scores in place: the softmax of each row over its attended
// entries, 0 elsewhere. Returns per row lse, -inf where nothing is attended.
void masked_softmax(Eigen::Block<Matrix> p, const Eigen::Block<Flags>& allowed, double scale, double* lse, TileFault fault) {
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
      if (allowed(i, j)) {
        sum += p(i, j) = std::exp(p(i, j) - row_max);
        continue;
      }
      if (fault == TileFault::softmax_sums_masked_entries) sum += std::min(std::exp(p(i, j) * scale - row_max), 1.0);
      p(i, j) = 0.0;
    }
    for (int64_t j = 0; j < p.cols(); ++j) p(i, j) /= sum;
    lse[i] = (fault == TileFault::lse_without_row_max ? 0.0 : row_max) + std::log(sum);
  }
}

}  // namespace

void attend_tile(Scratch& s, int64_t m, const ConstRef& k, const ConstRef& v, double scale, bool backward,
                 double* lse, Ref dk, Ref dv) {
  const int64_t n = k.rows();
  auto p = s.p.topLeftCorner(m, n);
  const auto q = s.q.topRows(m);
  auto o = s.o.topRows(m);
  const TileFault fault = planted_tile_fault();
  p.noalias() = q * k.transpose();
  masked_softmax(p, s.allowed.topLeftCorner(m, n), scale, lse, fault);
  if (fault == TileFault::pv_skips_last_key && n > 1) o.noalias() = p.leftCols(n - 1) * v.topRows(n - 1);
  else o.noalias() = p * v;
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
  delta = p.cwiseProduct(ds).rowwise().sum();
  if (fault == TileFault::ds_without_delta) delta.setZero();
  ds = p.cwiseProduct(ds.colwise() - delta);  // dS, 0 where P is
  dq.noalias() = scale * (ds * k);
  dk.noalias() += scale * (ds.transpose() * q);
  dv.noalias() += p.transpose() * d_o;
  for (int64_t i = 0; i < m; ++i)
    if (lse[i] == kNegInf) dq.row(i).setZero();
}

double work_of(const AttentionSizes& z) {
  return double(z.rows) * double(z.q_len) * double(z.kv_len) * double(z.heads_q) * double(z.head_dim);
}

int64_t dense_units(const AttentionSizes& z) { return z.heads_kv * ((z.q_len + kTileRows - 1) / kTileRows); }

int64_t workers_for(int64_t units, double work) {
  if (work < kSerialWork) return 1;
  return std::clamp<int64_t>(reference_threads(), 1, std::max<int64_t>(units, 1));
}

void for_each_unit(int64_t units, int64_t workers, const std::function<void(int64_t, int64_t)>& work) {
  if (workers <= 1 || units <= 1) {
    for (int64_t u = 0; u < units; ++u) work(u, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run = [&](int64_t worker) {
    try {
      for (int64_t u = next++; u < units; u = next++) work(u, worker);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = units;  // the others stop after their current unit
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int64_t w = 1; w < workers; ++w) threads.emplace_back(run, w);
  } catch (const std::system_error&) {
    // Fewer threads than asked: the same results, later.
  }
  run(0);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace attn_oracle::ref::tiles
