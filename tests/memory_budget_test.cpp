// memory_budget_test.cpp: sizes parse, needs add up without overflowing, and the
// reference and the production twins refuse what would not fit with
// over_memory_budget (naming the need and the budget) instead of allocating it.
#include <gtest/gtest.h>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle {
namespace {

// Restores the process-wide budget after each test.
class MemoryBudget : public ::testing::Test {
 protected:
  void TearDown() override { set_memory_budget(0); }
};

PackedBatch self_attention_row(int64_t tokens, int64_t max_segments = 1) {
  PackedBatch b;
  b.mask = MaskKind::causal;
  b.max_segments = max_segments;
  IntArray ids{{1, tokens}, std::vector<int64_t>(tokens, 1)}, pos{{1, tokens}, {}};
  for (int64_t t = 0; t < tokens; ++t) pos.data.push_back(t);
  b.q = b.kv = PackedSide{ids, pos};
  return b;
}

TEST_F(MemoryBudget, ParsesSizesWithSuffixes) {
  EXPECT_EQ(parse_memory_size("4096"), 4096);
  EXPECT_EQ(parse_memory_size("64K"), 64 << 10);
  EXPECT_EQ(parse_memory_size("512m"), int64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("4G"), int64_t{4} << 30);
  for (const char* bad : {"", "0", "-1", "4T", "4GB", "G", "99999999999G"})
    EXPECT_FALSE(parse_memory_size(bad)) << bad;
}

TEST_F(MemoryBudget, NeedsAddUpAndOverflowIsReported) {
  MemoryNeed need;
  need.add("a", {2, 3});
  need.add("b", {4});
  EXPECT_EQ(need.total(), 10);
  need.add("c", {INT64_MAX, 2});
  EXPECT_FALSE(need.total());
  const auto e = need.check("test");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, ErrorCode::over_memory_budget);
  EXPECT_NE(e->message.find("c overflows int64"), std::string::npos) << e->message;
}

// The mask is a run of keys a query (24 bytes) and a key's coverage (8 bytes):
// 3000 tokens a side take 96 kB, where the [Tq, Tkv] flags took 9 MB.
TEST_F(MemoryBudget, ReferenceMetadataRefusesAMaskOverTheBudget) {
  set_memory_budget(64 << 10);
  const auto md = ref::metadata(self_attention_row(3000));
  ASSERT_FALSE(md);
  EXPECT_EQ(md.error().code, ErrorCode::over_memory_budget);
  EXPECT_NE(md.error().message.find("bytes"), std::string::npos) << md.error().message;
  EXPECT_NE(md.error().message.find("65536 bytes"), std::string::npos) << md.error().message;
  set_memory_budget(1 << 20);
  EXPECT_TRUE(ref::metadata(self_attention_row(3000)));
}

TEST_F(MemoryBudget, ReferenceAndTwinAgreeOnAHugeMaxSegments) {
  const PackedBatch b = self_attention_row(4, int64_t{1} << 40);
  const auto ref = ref::metadata(b);
  const auto twin = gpu::metadata_twin(b);
  ASSERT_FALSE(ref);
  ASSERT_FALSE(twin);
  EXPECT_EQ(ref.error().code, ErrorCode::over_memory_budget);
  EXPECT_EQ(twin.error().code, ErrorCode::over_memory_budget);
  EXPECT_EQ(ref::metadata(self_attention_row(4, INT64_MAX)).error().code, ErrorCode::over_memory_budget);
}

TEST_F(MemoryBudget, AttentionTensorsOverTheBudgetAreRefusedBeforeAllocation) {
  AttentionProblem p{self_attention_row(4), AttentionShape{}};
  p.shape.heads_q = p.shape.heads_kv = 2;
  p.shape.head_dim = int64_t{1} << 30;  // 2^30 x 2 x 4 x 8 x 4 bytes: 256 GiB
  const auto checked = validate_attention(p);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().code, ErrorCode::over_memory_budget);
  EXPECT_TRUE(generate_inputs(p, 1).q.empty());  // no allocation
  const auto twin = gpu::attention_twin(p, AttentionInputs{});
  ASSERT_FALSE(twin);
  EXPECT_EQ(twin.error().code, ErrorCode::over_memory_budget);
}

}  // namespace
}  // namespace attn_oracle

namespace attn_oracle {
namespace {

// T = 16384, H = 8, D = 128 in documents of 512 tokens, with backward.
AttentionProblem long_row() {
  const int64_t t = 16384;
  std::vector<int64_t> ids(t), pos(t);
  for (int64_t i = 0; i < t; ++i) ids[i] = i / 512 + 1, pos[i] = i % 512;
  AttentionProblem p;
  p.batch.q = p.batch.kv = PackedSide{IntArray({1, t}, ids), IntArray({1, t}, pos)};
  p.batch.mask = MaskKind::causal;
  p.batch.max_segments = 32;
  p.shape.heads_q = p.shape.heads_kv = 8;
  p.shape.head_dim = 128;
  p.shape.backward = true;
  return p;
}

// Each path is charged for what it allocates: the tensors (1 GiB here) for all;
// no path holds [Tq, Tkv] (6.7 GB here for the old dense row), so the naive
// run and both references judge a 16k-token row in 4 GiB, and none in 1 GiB,
// where the message names the largest part: 8 workers' copies of a kv head.
TEST_F(MemoryBudget, ALongRowFitsEveryPath) {
  set_memory_budget(int64_t{4} << 30);
  set_reference_threads(8);
  const AttentionProblem p = long_row();
  for (ScoreMemory m : {ScoreMemory::streaming, ScoreMemory::dense_row, ScoreMemory::query_tiles,
                        ScoreMemory::query_tiles_with_mask})
    EXPECT_TRUE(validate_attention(p, nullptr, m).ok()) << static_cast<int>(m);
  set_memory_budget(int64_t{1} << 30);
  const auto dense = validate_attention(p, nullptr, ScoreMemory::dense_row);
  ASSERT_FALSE(dense.ok());
  EXPECT_EQ(dense.error().code, ErrorCode::over_memory_budget);
  EXPECT_NE(dense.error().message.find("the largest part is per worker"), std::string::npos) << dense.error().message;
  set_reference_threads(0);
}

}  // namespace
}  // namespace attn_oracle

namespace attn_oracle {
namespace {

// The suite's own budget refusing a case (the reference's, or the backend's
// over_memory_budget passed on) is a declined draw with the reason: never a
// crash, never a failure blamed on the backend.
TEST_F(MemoryBudget, ARefusalInsideAPropertyIsADeclineNotAFailure) {
  register_production_backends();
  auto cpu = BackendRegistry::instance().make("cpu");
  ASSERT_TRUE(cpu);
  RunSettings s = default_run_settings();
  s.cases = 30;
  for (const char* budget : {"512", "3K", "1M"}) {
    set_memory_budget(*parse_memory_size(budget));
    for (const char* id : {"attention/matchesReference", "attention/documentPermutationInvariance",
                           "small_seq/rejectsInvalidInputsWithTheirCode", "sharding/validTriplesMatchTheUnshardedRun"}) {
      const PropertyOutcome o = run_property(*find_property(id), *cpu, s);
      EXPECT_NE(o.status, PropertyOutcome::Status::failed) << id << " at " << budget << ": " << o.message;
    }
  }
}

}  // namespace
}  // namespace attn_oracle
