// repro_test.cpp: what `repro` finds and writes (repro.hpp, harness/repro.hpp), on
// planted twins and their fixtures: the call a counterexample's check makes that the
// twin answers wrongly (the case itself for matchesReference, the transformed call of
// a metamorphic property), nothing for a backend that agrees, the one-to-three-line
// summary, and a GoogleTest file that needs only the seam. tests/consumers/vendor_run.cmake
// builds such a file and runs it (fails on the twin, passes on the reference).
#include <gtest/gtest.h>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/harness/repro.hpp"
#include "attn_oracle/cases/metadata_case.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/runner/repro.hpp"
#include "attn_oracle/runner/run_outcome.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

std::unique_ptr<Backend> planted_backend(const std::string& name) {
  for (auto* bugs : {planted::metadata_bugs, planted::attention_bugs})
    for (planted::PlantedBug& b : bugs())
      if (b.name == name) return b.make();
  return nullptr;
}

Case fixture(const std::string& name) {
  return read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/" + name + ".case.json").value();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A failure offers `repro` only where it writes a program: sharding and context-parallel cases
// replay (repro would answer "no GoogleTest form"), the others have one.
TEST(Repro, AFailureOffersReproOnlyForCasesThatHaveAStandaloneForm) {
  for (const char* id : {"metadata/matchesReference", "attention/matchesReference", "small_seq/matchesReference",
                         "kv_buffer/streamingMatchesWholeSequence"}) {
    PropertyFailure f;
    set_replay_commands(f, RunSettings{}, "cpu", id, true);
    EXPECT_NE(f.repro_command.find(" repro --backend cpu "), std::string::npos) << id;
  }
  for (const char* id : {"context_parallel/runMatchesTheUnshardedReference", "sharding/validTriplesMatchTheUnshardedRun"}) {
    PropertyFailure f;
    set_replay_commands(f, RunSettings{}, "cpu", id, true);
    EXPECT_EQ(f.repro_command, "") << id;
    EXPECT_NE(f.replay_command.find(" replay --backend cpu "), std::string::npos) << id;
  }
}

TEST(Repro, AMatchesReferenceCounterexampleIsItsOwnCall) {
  auto twin = planted_backend("no_trimming");
  Case c = fixture("no_trimming");
  const auto found = find_disagreement(*twin, c);
  ASSERT_TRUE(std::holds_alternative<Disagreement>(found)) << std::get<NoDisagreement>(found).why;
  const Disagreement* d = &std::get<Disagreement>(found);
  EXPECT_FALSE(d->transformed);
  EXPECT_FALSE(d->direct.property.has_value());
  EXPECT_EQ(d->direct.as<MetadataCase>()->batch, c.as<MetadataCase>()->batch);
  ASSERT_FALSE(d->lines.empty());
  EXPECT_TRUE(has(d->lines.front(), "backend")) << d->lines.front();
}

TEST(Repro, AMetamorphicCounterexampleGivesTheCallThatIsWrongOnItsOwn) {
  auto twin = planted_backend("offsets_from_seqlens");
  const Case c = fixture("offsets_from_seqlens");  // shiftingARowShiftsItsOffsets, drawn {row 0, shift 1, side q}
  const auto found = find_disagreement(*twin, c);
  ASSERT_TRUE(std::holds_alternative<Disagreement>(found)) << std::get<NoDisagreement>(found).why;
  const Disagreement* d = &std::get<Disagreement>(found);
  EXPECT_TRUE(d->transformed);
  const PackedBatch& b = d->direct.as<MetadataCase>()->batch;
  EXPECT_EQ(b.q.segment_ids.data.front(), 0) << "the shifted row starts with the padding the property added";
  EXPECT_TRUE(has(d->lines.front(), "q_offsets")) << d->lines.front();
}

TEST(Repro, ABackendThatAgreesHasNothingToReproduce) {
  auto reference = make_reference_backend();
  const auto found = find_disagreement(*reference, fixture("no_trimming"));
  ASSERT_TRUE(std::holds_alternative<NoDisagreement>(found));
  const NoDisagreement& none = std::get<NoDisagreement>(found);
  EXPECT_FALSE(none.declined);
  EXPECT_TRUE(has(none.why, "disagrees with the reference")) << none.why;
}

TEST(Repro, TheSummaryIsOneLineForMetadataAndTwoForAttention) {
  EXPECT_EQ(case_summary(fixture("offsets_from_seqlens")),
            "metadata padding_causal window (0, 0) M=1 | q ids [[1, 0]] pos [[0, 0]] | kv ids [[1]] pos [[0]]");
  const std::string attention = case_summary(fixture("kv_head_modulo"));
  EXPECT_EQ(attention, "attention no_mask M=1 | q ids [[1]] pos [[0]] | kv ids [[1]] pos [[1]]\n"
                       "fp32, heads 4/2, head_dim 1, forward, data seed 0");
}

TEST(Repro, TheGoogleTestFileNeedsOnlyTheSeamAndAssertsTheReferenceInline) {
  auto twin = planted_backend("kv_head_modulo");
  const Case c = fixture("kv_head_modulo");  // attention/gqaEqualsRepeatedKvHeads
  const auto found = find_disagreement(*twin, c);
  ASSERT_TRUE(std::holds_alternative<Disagreement>(found)) << std::get<NoDisagreement>(found).why;
  const Disagreement* d = &std::get<Disagreement>(found);
  const std::string test = gtest_reproduction(*d, *twin, "kv_head_modulo.case.json", c.property->id);
  EXPECT_TRUE(has(test, "#include <attn_oracle/seam/backend.hpp>")) << test;
  EXPECT_FALSE(has(test, "attn_oracle/reference")) << test;
  EXPECT_TRUE(has(test, "constexpr const char* kBackend = \"planted-kv_head_modulo\";")) << test;
  EXPECT_TRUE(has(test, "problem.shape.heads_q = 4;")) << test;
  EXPECT_TRUE(has(test, "expect_close(\"o\", got->o, {")) << test;
  EXPECT_TRUE(has(test, "// Floats: max |got - expected| must stay within the budget")) << test;
  EXPECT_TRUE(has(test, "TEST(Repro, AttentionGqaEqualsRepeatedKvHeads)")) << test;
}

}  // namespace
}  // namespace attn_oracle
