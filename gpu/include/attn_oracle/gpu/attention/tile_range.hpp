// tile_range.hpp: which kv tiles a q tile visits, and which q tiles a kv tile
// sees (backward). A tile is visited iff at least one element in it is allowed:
// tests/attention_tiles_test.cpp checks this against brute force over every
// (row, col) for every mask kind, window, length and tile shape.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

struct TileRange {
  int64_t begin, end;  // tile indices [begin, end); empty when begin >= end
};

// Keys allowed to queries [a0, a1) form one interval: from the first query's lo
// to the last query's hi (both ends are non-decreasing in a, and consecutive
// queries' intervals touch). Rows whose own interval is empty add nothing.
ATTN_HD TileRange kv_tile_range(int mask, int64_t left, int64_t right, int64_t a0, int64_t a1, int64_t lq,
                                int64_t lkv, int64_t tile_kv) {
  int64_t lo = lkv, hi = -1;
  // The first and last non-empty rows bound the union; scan in from both ends.
  for (int64_t a = a0; a < a1; ++a) {
    const KeyInterval k = key_interval(mask, left, right, a, lq, lkv);
    if (k.lo <= k.hi) { lo = k.lo; break; }
  }
  for (int64_t a = a1 - 1; a >= a0; --a) {
    const KeyInterval k = key_interval(mask, left, right, a, lq, lkv);
    if (k.lo <= k.hi) { hi = k.hi; break; }
  }
  if (lo > hi) return TileRange{0, 0};
  return TileRange{lo / tile_kv, hi / tile_kv + 1};
}

// Queries that attend any key of [b0, b1): the q tiles a kv tile must visit.
// hi(a) and lo(a) never decrease, so the queries with hi >= b0 and lo < b1 are
// one range, found by two binary searches (such a query's interval is never
// empty: an empty one has hi < 0 or lo > lkv - 1).
ATTN_HD TileRange q_tile_range(int mask, int64_t left, int64_t right, int64_t b0, int64_t b1, int64_t lq,
                               int64_t lkv, int64_t tile_q) {
  int64_t lo_a = 0, hi_a = lq;  // first a with hi(a) >= b0
  while (lo_a < hi_a) {
    const int64_t mid = lo_a + (hi_a - lo_a) / 2;
    if (key_interval(mask, left, right, mid, lq, lkv).hi >= b0) hi_a = mid;
    else lo_a = mid + 1;
  }
  const int64_t first = lo_a;
  lo_a = first, hi_a = lq;  // first a with lo(a) >= b1: one past the last query
  while (lo_a < hi_a) {
    const int64_t mid = lo_a + (hi_a - lo_a) / 2;
    if (key_interval(mask, left, right, mid, lq, lkv).lo >= b1) hi_a = mid;
    else lo_a = mid + 1;
  }
  const int64_t last = lo_a - 1;
  if (first > last) return TileRange{0, 0};
  return TileRange{first / tile_q, last / tile_q + 1};
}

}  // namespace attn_oracle::gpu
