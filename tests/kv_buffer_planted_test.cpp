// kv_buffer_planted_test.cpp: every kv_buffer property is seen to fail. Each
// planted bug of tests/planted/kv_buffer_bugs.cpp must be caught by its property
// within the default case count and shrunk small (at most 3 documents and 12
// tokens), written as a case file that reads back to the same problem and seed;
// and fixtures/regressions/<bug>.case.json, that shrunk case, must still catch it
// while the reference and the cpu twin pass it. Seed 20261122 unless RC_PARAMS
// names one.
#include <gtest/gtest.h>

#include <numeric>

#include "attn_oracle/kv_buffer_generators.hpp"
#include "attn_oracle/property_runner.hpp"
#include "planted/kv_buffer_bugs.hpp"
#include "planted/planted_runner.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

using planted::PlantedBug;

class KvBufferPlantedBug : public testing::TestWithParam<PlantedBug> {};

TEST_P(KvBufferPlantedBug, IsCaughtAndShrunkSmall) {
  const PlantedBug& bug = GetParam();
  PropertyOutcome o;
  ASSERT_TRUE(planted::caught(bug, o));
  ASSERT_EQ(o.counterexample->op, CaseOp::kv_buffer);
  const KvBufferProblem& p = o.counterexample->kv_buffer;
  const int64_t tokens = std::accumulate(p.doc_lengths.begin(), p.doc_lengths.end(), int64_t{0});
  std::cout << "[ planted  ] " << bug.name << " caught by " << bug.property << " after " << o.cases
            << " cases; shrunk to " << p.doc_lengths.size() << " documents, N=" << tokens
            << ", m=" << p.micro_seq_tokens << "\n" << o.message << "\n";
  EXPECT_LE(p.doc_lengths.size(), 3u) << o.message;
  EXPECT_LE(tokens, 12) << o.message;
  ASSERT_FALSE(o.case_path.empty());
  auto reread = read_case_file(o.case_path);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  EXPECT_EQ(reread->kv_buffer, p);
  EXPECT_EQ(reread->data_seed, o.counterexample->data_seed);
}

TEST_P(KvBufferPlantedBug, ItsRegressionFixtureStillCatchesIt) {
  const PlantedBug& bug = GetParam();
  const std::string path = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/" + bug.name + ".case.json";
  auto c = read_case_file(path);
  ASSERT_TRUE(c.ok()) << path << ": " << c.error().message;
  ASSERT_EQ(c->op, CaseOp::kv_buffer);
  const KvBufferDraw draw{c->kv_buffer, c->data_seed.value_or(0)};
  auto planted = bug.make();
  EXPECT_TRUE(check_kv_buffer_property(bug.property, *planted, draw).has_value()) << bug.name << " passes " << path;
  register_builtin_backends();
  for (const char* name : {"reference", "cpu"}) {
    auto backend = BackendRegistry::instance().make(name);
    const auto failure = check_kv_buffer_property(bug.property, *backend, draw);
    EXPECT_FALSE(failure.has_value()) << name << ": " << *failure;
  }
}

INSTANTIATE_TEST_SUITE_P(Planted, KvBufferPlantedBug, testing::ValuesIn(planted::kv_buffer_bugs()),
                         [](const auto& info) { return info.param.name; });

// Every kv_buffer property has a planted bug here.
TEST(KvBufferPlantedBugs, CoverEveryKvBufferProperty) {
  std::set<std::string> covered;
  for (const PlantedBug& b : planted::kv_buffer_bugs()) covered.insert(b.property);
  for (const PropertyDef& p : kv_buffer_properties()) EXPECT_TRUE(covered.count(p.id)) << p.id << " has no planted bug";
}

}  // namespace
}  // namespace attn_oracle
