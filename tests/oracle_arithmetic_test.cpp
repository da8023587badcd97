// oracle_arithmetic_test.cpp: attention/oracleArithmeticMatchesScalarLoops
// catches each fault planted in the tile arithmetic both float64 references
// share (reference/include/attn_oracle/reference/tile_faults.hpp), on every
// seed, and shrinks it to a few tokens; with no fault it passes.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/reference/tile_faults.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle {
namespace {

using ref::TileFault;

const PropertyDef& the_property() { return *find_property("attention/oracleArithmeticMatchesScalarLoops"); }

PropertyOutcome run_with(TileFault fault, uint64_t seed) {
  auto backend = make_reference_backend();
  RunSettings settings = default_run_settings();
  settings.seed = seed;
  settings.cases = 100;
  ref::ScopedTileFault planted(fault);
  return run_property(the_property(), *backend, settings);
}

TEST(OracleArithmetic, WithoutAFaultMatchesTheScalarLoops) {
  const PropertyOutcome o = run_with(TileFault::none, kDefaultSeed);
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << (o.failures.empty() ? o.message : o.failures.front().message);
  EXPECT_GE(o.judged(), 95);
}

class PlantedTileFault : public testing::TestWithParam<TileFault> {};

// At most this many tokens a side and rows in the shrunk case.
constexpr int64_t kMaxShrunkTokens = 3;
constexpr int64_t kMaxShrunkRows = 1;

TEST_P(PlantedTileFault, IsCaughtOnEverySeedAndShrinksToAFewTokens) {
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}}) {
    const auto start = std::chrono::steady_clock::now();
    const PropertyOutcome o = run_with(GetParam(), seed);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << "seed " << seed << ": escaped";
    const PropertyFailure& f = o.failures.front();
    EXPECT_NE(f.message.find("reference vs its scalar loops"), std::string::npos) << f.message;
    const AttentionCase& c = *f.counterexample.as<AttentionCase>();
    const int64_t q_tokens = c.problem.batch.q.segment_ids.shape.back();
    const int64_t kv_tokens = c.problem.batch.kv.segment_ids.shape.back();
    const int64_t rows = shape_product(c.problem.batch.q.segment_ids.shape) / std::max<int64_t>(q_tokens, 1);
    EXPECT_LE(q_tokens, kMaxShrunkTokens) << f.message;
    EXPECT_LE(kv_tokens, kMaxShrunkTokens) << f.message;
    EXPECT_LE(rows, kMaxShrunkRows) << f.message;
    std::cout << "seed " << seed << ": caught at draw " << f.draw << ", shrunk to " << rows << " row(s), Tq " << q_tokens
              << ", Tkv " << kv_tokens << ", heads " << c.problem.shape.heads_q << "/" << c.problem.shape.heads_kv
              << ", D " << c.problem.shape.head_dim << " (" << seconds << " s): " << f.message << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Planted, PlantedTileFault,
                         testing::Values(TileFault::lse_without_row_max, TileFault::softmax_sums_masked_entries,
                                         TileFault::pv_skips_last_key, TileFault::ds_without_delta),
                         [](const auto& info) {
                           switch (info.param) {
                             case TileFault::lse_without_row_max: return std::string("lse_without_row_max");
                             case TileFault::softmax_sums_masked_entries: return std::string("softmax_sums_masked_entries");
                             case TileFault::pv_skips_last_key: return std::string("pv_skips_last_key");
                             case TileFault::ds_without_delta: return std::string("ds_without_delta");
                             default: return std::string("none");
                           }
                         });

}  // namespace
}  // namespace attn_oracle
