// tile_faults.hpp: a test-only seam into the tile arithmetic both float64
// references share (src/attention_tiles.cpp). The dense and per-document
// references differ only in how they fill a tile's mask, so a mistake in the
// scores, softmax, lse, P V or dS would agree with itself; the property
// attention/oracleArithmeticMatchesScalarLoops compares them with the scalar
// loops of reference/scalar/ instead, and tests/oracle_arithmetic_test.cpp
// plants each fault below to see it caught and shrunk. Nothing outside tests/
// sets one; with none set (the default) the arithmetic is untouched, and the
// check costs one relaxed atomic load per tile.
#pragma once

namespace attn_oracle::ref {

enum class TileFault {
  none,
  lse_without_row_max,          // lse = log(sum) instead of max + log(sum)
  softmax_sums_masked_entries,  // the softmax denominator also sums exp of masked scores (each capped at 1)
  pv_skips_last_key,            // O = P V over every key of the tile but the last
  ds_without_delta,             // dS = P * dP, the rowsum(P * dP) term dropped
};

TileFault planted_tile_fault();

// Plants `fault` for its lifetime (tests only, no reference call in flight).
class ScopedTileFault {
 public:
  explicit ScopedTileFault(TileFault fault);
  ~ScopedTileFault();
  ScopedTileFault(const ScopedTileFault&) = delete;
  ScopedTileFault& operator=(const ScopedTileFault&) = delete;

 private:
  TileFault previous_;
};

}  // namespace attn_oracle::ref
