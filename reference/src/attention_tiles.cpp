// attention_tiles.cpp: see attention_tiles.hpp.
#include "attention_tiles.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "attn_oracle/model/memory_budget.hpp"

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
