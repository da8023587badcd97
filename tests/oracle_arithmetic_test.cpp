// oracle_arithmetic_test.cpp: attention/oracleArithmeticMatchesScalarLoops
// catches each fault planted in the tile arithmetic both float64 references
// share (tests/planted/tile_faults.hpp: the references built again with one
// step wrong, installed through the oracle seam), on every seed, and shrinks it
// to a few tokens; with no fault it passes. tests/CMakeLists.txt also checks
// that the shipped reference holds none of them (reference_has_no_faults).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "planted/tile_faults.hpp"
#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle {
namespace {

const PropertyDef& the_property() { return *find_property("attention/oracleArithmeticMatchesScalarLoops"); }

// The property on the reference backend with `oracle` installed.
PropertyOutcome run_with(const ReferenceCalls& oracle, uint64_t seed) {
  auto backend = make_reference_backend();
  RunSettings settings = default_run_settings();
  settings.seed = seed;
  settings.cases = 100;
  ScopedReferenceCalls installed(oracle);
  return run_property(the_property(), *backend, settings);
}

TEST(OracleArithmetic, WithoutAFaultMatchesTheScalarLoops) {
  const PropertyOutcome o = run_with(ReferenceCalls{}, kDefaultSeed);
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << (o.failures.empty() ? o.message : o.failures.front().message);
  EXPECT_GE(o.judged(), 95);
}

class PlantedTileFault : public testing::TestWithParam<planted::TileFault> {};

// At most this many tokens a side and rows in the shrunk case.
constexpr int64_t kMaxShrunkTokens = 3;
constexpr int64_t kMaxShrunkRows = 1;

TEST_P(PlantedTileFault, IsCaughtOnEverySeedAndShrinksToAFewTokens) {
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}}) {
    const auto start = std::chrono::steady_clock::now();
    const PropertyOutcome o = run_with(GetParam().oracle, seed);
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

INSTANTIATE_TEST_SUITE_P(Planted, PlantedTileFault, testing::ValuesIn(planted::tile_faults()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace attn_oracle
