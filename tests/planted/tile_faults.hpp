// tile_faults.hpp: planted faults in the float64 oracle's own tile arithmetic
// (reference/src/attention_tiles.hpp), which the dense and per-document
// references share, so that a mistake there agrees with itself across the two.
// Each fault is the exact arithmetic with one step replaced, built into both
// references by instantiating them with the faulty steps (tile_faults.cpp, in
// the test-only library attn_oracle_planted_reference; the shipped reference
// is built with the exact steps alone) and installed through the oracle seam
// (ScopedReferenceCalls: ReferenceCalls::dense and ReferenceCalls::per_document):
//  - lse_without_row_max: lse = log(sum) instead of max + log(sum).
//  - softmax_sums_masked_entries: the softmax denominator also sums exp of the
//    masked scores (each capped at 1), as a mask applied after the sum would.
//  - pv_skips_last_key: O = P V over every key of the tile but the last (an
//    off-by-one in a key loop).
//  - ds_without_delta: dS = P * dP, the rowsum(P * dP) term dropped.
// tests/oracle_arithmetic_test.cpp requires attention/oracleArithmeticMatchesScalarLoops
// to catch each on every seed and shrink it to a few tokens.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "attn_oracle/properties/reference_calls.hpp"

namespace attn_oracle::planted {

struct TileFault {
  std::string name;
  ReferenceCalls oracle;  // the correct oracle with both references built on the faulty tile
};

inline void PrintTo(const TileFault& f, std::ostream* os) { *os << f.name; }

std::vector<TileFault> tile_faults();

}  // namespace attn_oracle::planted
