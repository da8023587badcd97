// planted_bugs_test.cpp: every property is seen to fail, and every failure
// replays. For each planted bug (tests/planted/, one or more per property):
//  - its property catches it within the default case count and shrinks it small
//    (at most 2 rows, 8 tokens a side and 4 devices, a K/V-buffer sequence at
//    most 8 tokens, no extra dims unless the bug lives in them);
//  - the counterexample file reads back to the same case, property record
//    included, and replaying it on the planted backend (replay.hpp, what
//    `attn-oracle replay` runs) fails with the same property id and the same
//    first-mismatch message; replaying it on the reference passes;
//  - fixtures/regressions/<bug>.case.json, its promoted counterexample, still
//    catches it (the fixture test replays it on every built-in backend).
// The seed is the default one unless RC_PARAMS names another (planted_runner.hpp). With
// ATTN_ORACLE_WRITE_REGRESSIONS=1 the test (re)writes those fixtures.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "attn_oracle/model/environment.hpp"
#include "attn_oracle/harness/cli.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/runner/replay.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "planted/convention_mocks.hpp"
#include "planted/planted_backends.hpp"
#include "planted/planted_runner.hpp"
#include "planted/tiled_attention.hpp"

namespace attn_oracle {
namespace {

using planted::PlantedBug;
using planted::planted_settings;

std::vector<PlantedBug> all_bugs() {
  std::vector<PlantedBug> bugs;
  for (auto* group : {planted::metadata_bugs, planted::attention_bugs, planted::small_seq_bugs,
                      planted::kv_buffer_bugs, planted::sharding_bugs, planted::context_parallel_bugs,
                      planted::convention_bugs})
    for (PlantedBug& b : group()) bugs.push_back(std::move(b));
  return bugs;
}

// The segment-id arrays of a case's packed batch (none for a K/V-buffer sequence).
std::vector<const IntArray*> batch_ids(const Case& c) {
  const PackedBatch* b = c.as<MetadataCase>() ? &c.as<MetadataCase>()->batch : nullptr;
  if (const AttentionCase* a = attention_fields(c.payload)) b = &a->problem.batch;
  return b ? std::vector<const IntArray*>{&b->q.segment_ids, &b->kv.segment_ids} : std::vector<const IntArray*>{};
}

std::string regression_path(const PlantedBug& bug) {
  return std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/" + bug.name + ".case.json";
}

// The counterexample promoted to its regression fixture, with a note on where it came from.
void write_regression(const PlantedBug& bug, const PropertyFailure& f) {
  const std::string note = "Shrunk counterexample of the planted bug '" + bug.name + "' (tests/planted/): " +
                           bug.what + ". Caught by " + bug.property + " (seed " +
                           std::to_string(f.counterexample.property->seed) + ", draw " + std::to_string(f.draw) + ", " +
                           std::to_string(f.shrinks) + " shrinks): " + f.message +
                           ". Regenerate with ATTN_ORACLE_WRITE_REGRESSIONS=1 ctest -R PlantedBug.";
  ASSERT_TRUE(write_case_file(regression_path(bug), promote_case(f.counterexample, note)));
}

class PlantedBugTest : public testing::TestWithParam<PlantedBug> {};

TEST_P(PlantedBugTest, IsCaughtShrunkSmallAndReplaysTheSameFailure) {
  const PlantedBug& bug = GetParam();
  PropertyOutcome o;
  ASSERT_TRUE(planted::caught(bug, o));
  const PropertyFailure& f = o.failures.front();
  EXPECT_EQ(f.message.find("generator bug"), std::string::npos) << f.message;
  EXPECT_FALSE(f.nondeterministic) << f.message;
  const Case& c = f.counterexample;
  const CaseSize size = op_of(c).size(c.payload);
  std::cout << "[ planted  ] " << bug.name << " caught by " << bug.property << " at draw " << f.draw << ", "
            << f.shrinks << " shrinks; " << op_of(c).name() << " rows=" << size.rows << " tokens=" << size.tokens
            << " devices=" << size.devices << ": " << f.message << "\n";
  EXPECT_LE(size.rows, bug.max_shrunk_rows) << f.message;
  EXPECT_LE(size.tokens, bug.max_shrunk_tokens) << f.message;
  EXPECT_LE(size.devices, 4) << f.message;
  if (!bug.needs_extra_dims) {
    for (const IntArray* ids : batch_ids(c)) EXPECT_EQ(ids->shape.size(), 2u) << "extra dims the bug does not need";
  }

  ASSERT_FALSE(f.case_path.empty());
  const Expected<Case> reread = read_case_file(f.case_path);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  EXPECT_TRUE(reread.value() == c) << "the file does not read back to the counterexample";
  ASSERT_TRUE(reread->property.has_value());
  EXPECT_EQ(reread->property->id, bug.property);
  EXPECT_NE(f.replay_command.find(f.case_path), std::string::npos);

  const Judgement replayed = replay_case(*bug.make(), reread.value());
  ASSERT_EQ(replayed.status, Judgement::Status::fail) << "the counterexample replays as " << to_string(replayed.status);
  EXPECT_EQ(replayed.lines.at(0), bug.property + ": " + f.message);
  const Judgement on_reference = replay_case(*make_reference_backend(), reread.value());
  EXPECT_EQ(on_reference.status, Judgement::Status::pass) << (on_reference.lines.empty() ? "" : on_reference.lines[0]);

  if (environment_value(read_environment(), "ATTN_ORACLE_WRITE_REGRESSIONS") == "1")
    write_regression(bug, f);
}

// fixtures/regressions/<bug>.case.json pins the bug: replayed on the planted
// backend it fails (its property record re-runs the property that caught it).
TEST_P(PlantedBugTest, ItsRegressionFixtureStillCatchesIt) {
  const PlantedBug& bug = GetParam();
  const Expected<Judgement> j = replay_file(*bug.make(), regression_path(bug));
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(j->status, Judgement::Status::fail) << bug.name << " passes " << regression_path(bug);
}

INSTANTIATE_TEST_SUITE_P(Planted, PlantedBugTest, testing::ValuesIn(all_bugs()),
                         [](const auto& info) { return info.param.name; });

// The planted tiled forward is a faithful kernel shape until a bug is planted:
// without one it passes every attention property it can run (on representable
// inputs; the rest it declares unsupported, as the kernels' metadata view must).
TEST(PlantedTiledForward, WithoutABugPassesEveryAttentionProperty) {
  auto backend = planted::tiled_backend("planted-tiled", {});
  int ran = 0;
  for (const PropertyDef& p : all_properties()) {
    if (p.id.rfind("attention/", 0) != 0) continue;
    const PropertyOutcome o = run_property(p, *backend, planted_settings());
    if (o.status == PropertyOutcome::Status::skipped) continue;
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << p.id << ": " << o.message;
    ran += o.status == PropertyOutcome::Status::passed;
  }
  EXPECT_GE(ran, 6);
}

// The mock kernels written in FlashAttention's (both versions' -1 rules) and
// cuDNN's conventions, run through their adapters, pass every attention
// property they can run; what an adapter refuses they declare unsupported.
TEST(ConventionMocks, WithoutAMistakePassEveryAttentionProperty) {
  using adapters::flash_attention::Version;
  std::vector<std::unique_ptr<Backend>> mocks;
  mocks.push_back(planted::flash_attention_mock("mock-flash-attention-3", {}, Version::fa3));
  mocks.push_back(planted::flash_attention_mock("mock-flash-attention-2", {}, Version::fa2));
  mocks.push_back(planted::cudnn_mock("mock-cudnn"));
  for (auto& mock : mocks) {
    int ran = 0;
    for (const PropertyDef& p : all_properties()) {
      if (p.id.rfind("attention/", 0) != 0) continue;
      const PropertyOutcome o = run_property(p, *mock, planted_settings());
      if (o.status == PropertyOutcome::Status::skipped) continue;
      EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << mock->name() << ", " << p.id << ": " << o.message;
      ran += o.status == PropertyOutcome::Status::passed;
    }
    EXPECT_GE(ran, 6) << mock->name();
  }
}

// eval prints a NaN as the string "nan" (never null, which is no number at all)
// and exits 3: a script cannot take a NaN for a result.
TEST(PlantedBugs, EvalExitsThreeOnANaNOutput) {
  for (const PlantedBug& b : all_bugs())
    if (b.name == "nan_for_empty_rows") BackendRegistry::instance().add("planted-nan", b.make);
  register_reference_backend();
  const std::string path = std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/nan_for_empty_rows.case.json";
  testing::internal::CaptureStdout();
  const int status = run_cli({"eval", "--backend", "planted-nan", path}, CheckEnvironment{});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 3) << out;
  EXPECT_NE(out.find("\"nan\""), std::string::npos) << out;
  EXPECT_EQ(out.find("null"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(run_cli({"eval", "--backend", "reference", path}, CheckEnvironment{}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("\"-inf\""), std::string::npos);
}

// Kernel bugs live at tile edges and in wide heads: the default draws (the ci
// profile, 100 cases) must reach them on every seed, not by luck. Searched
// draw by draw (run_draw), without shrinking: only "found at all" matters here.
// Likewise the input classes where packing bugs live (interior padding, equal
// positions, bottom-right with fewer queries than keys, ids above M that come
// back, size-1 extra dims after larger ones): each class's bug on at least 9
// seeds of 10.
TEST(PlantedBugs, BugsOfEachInputClassAreFoundOnNineOfTenSeeds) {
  const std::map<std::string, int> at_least = {
      {"drop_keys_past_64", 10}, {"wide_head_upper_half_unstored", 10}, {"gap_counted_in_previous_document", 9},
      {"equal_positions_accepted", 9}, {"top_left_for_bottom_right", 9}, {"too_many_before_noncontiguous", 9},
      {"size_one_dims_only_leading", 9}, {"outputs_truncated", 9}, {"one_sided_document_counted", 9},
      {"rescale_skipped_in_one_key_tile", 10}};
  for (const PlantedBug& bug : all_bugs()) {
    if (!at_least.count(bug.name)) continue;
    int seeds_found = 0;
    auto backend = bug.make();
    const PropertyDef& property = *find_property(bug.property);
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      RunSettings s = planted_settings();
      s.seed = seed;
      int found_at = -1;
      const DrawContext context = draw_context(*backend, s.draws);
      for (int draw = 0; draw < s.cases && found_at < 0; ++draw)
        if (run_draw(property, context, s, draw, {}).kind == TrialResult::Kind::failed) found_at = draw;
      seeds_found += found_at >= 0;
      std::cout << "[ planted  ] " << bug.name << ", seed " << seed << ": found at draw " << found_at << "\n";
    }
    EXPECT_GE(seeds_found, at_least.at(bug.name)) << bug.name << " found on " << seeds_found << " seeds of 10";
  }
}

// Where GPU kernels tile (generators.hpp, the kernel-tile mode): a key loop
// that stops after 256 or after 1024 keys of a document, and GQA groups wider
// than 4 query heads mapped to the wrong kv head, are caught in the default
// budget on each of three seeds (the default one, 1 and 2), shrink to a
// document just past the bound (or to a short one for the heads), and replay
// the same failure.
TEST(PlantedBugs, KernelTileBugsFailOnThreeOfThreeSeedsShrunkAndReplayed) {
  const std::map<std::string, int64_t> past_keys = {
      {"key_loop_stops_at_256", 257}, {"key_loop_stops_at_1024", 1025}, {"wide_gqa_group_packed", 1}};
  int checked = 0;
  for (const PlantedBug& bug : all_bugs()) {
    if (!past_keys.count(bug.name)) continue;
    ++checked;
    auto backend = bug.make();
    const PropertyDef& property = *find_property(bug.property);
    for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}}) {
      RunSettings s = planted_settings();
      s.seed = seed;
      // The budget's draws up to the first failing one, then that draw alone
      // shrunk (the shard of one draw: the same draw as in the whole run).
      int first = -1;
      const DrawContext context = draw_context(*backend, s.draws);
      for (int draw = 0; draw < s.cases && first < 0; ++draw)
        if (run_draw(property, context, s, draw, {}).kind == TrialResult::Kind::failed) first = draw;
      ASSERT_GE(first, 0) << bug.name << " escaped " << s.cases << " draws on seed " << seed;
      s.shard = Shard{first, s.cases};
      const PropertyOutcome o = run_property(property, *backend, s);
      ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << bug.name << " escaped on seed " << seed;
      ASSERT_FALSE(o.failures.empty());
      const PropertyFailure& f = o.failures.front();
      EXPECT_EQ(f.draw, first);
      const CaseSize size = op_of(f.counterexample).size(f.counterexample.payload);
      const AttentionShape& shape = attention_fields(f.counterexample.payload)->problem.shape;
      std::cout << "[ planted  ] " << bug.name << ", seed " << seed << ": first failing draw " << f.draw << ", "
                << f.shrinks << " shrinks to rows=" << size.rows << " tokens=" << size.tokens << " heads "
                << shape.heads_q << "/" << shape.heads_kv << ": " << f.message << "\n";
      EXPECT_LE(size.tokens, bug.max_shrunk_tokens) << bug.name << " on seed " << seed;
      EXPECT_GE(size.tokens, past_keys.at(bug.name)) << bug.name << " on seed " << seed;
      EXPECT_LE(size.rows, bug.max_shrunk_rows) << bug.name << " on seed " << seed;
      const Judgement replayed = replay_case(*bug.make(), f.counterexample);
      ASSERT_EQ(replayed.status, Judgement::Status::fail) << bug.name << " on seed " << seed;
      EXPECT_EQ(replayed.lines.at(0), bug.property + ": " + f.message);
    }
  }
  EXPECT_EQ(checked, 3);
}

// Whether docs/semantics.md quotes `message` as it is printed (its examples of
// metadata judged through attention are these planted bugs' messages).
bool quoted_in_semantics_doc(const std::string& message) {
  std::ifstream in(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/../docs/semantics.md");
  std::stringstream doc;
  doc << in.rdbuf();
  return doc.str().find("\n" + message + "\n") != std::string::npos;
}

// The case a transforming property prints is the drawn one; its message says
// what the transformation did, as metadata/extremePositionsChangeNothing's does.
TEST(PlantedBugs, ExtremeIntegerFailuresSayWhatWasRewritten) {
  for (const PlantedBug& bug : planted::attention_bugs()) {
    if (bug.name != "window_as_int32") continue;
    const PropertyOutcome o = run_property(*find_property(bug.property), *bug.make(), planted_settings());
    ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
    const std::string& message = o.failures.at(0).message;
    EXPECT_NE(message.find("with the largest position moved to INT64_MAX - "), std::string::npos) << message;
    EXPECT_NE(message.find(") written as ("), std::string::npos) << message;
    return;
  }
  FAIL() << "no planted bug window_as_int32";
}

// Metadata bugs that attention shows are integer bugs too: each planted for
// metadata/drivesAttentionLikeTheReference also fails the exact property, and
// the message of the one that drops keys names the field.
TEST(PlantedBugs, MetadataBugsAttentionShowsAlsoFailTheExactProperty) {
  for (const PlantedBug& bug : planted::metadata_bugs()) {
    if (bug.property != "metadata/drivesAttentionLikeTheReference") continue;
    auto backend = bug.make();
    const PropertyOutcome exact = run_property(*find_property("metadata/matchesReference"), *backend, planted_settings());
    EXPECT_EQ(exact.status, PropertyOutcome::Status::failed) << bug.name;
    const PropertyOutcome through = run_property(*find_property(bug.property), *backend, planted_settings());
    ASSERT_EQ(through.status, PropertyOutcome::Status::failed) << bug.name;
    if (bug.name == "last_key_of_each_row_dropped") {
      EXPECT_NE(through.failures.at(0).message.find("cu_seqlens_kv["), std::string::npos) << through.failures.at(0).message;
      EXPECT_TRUE(quoted_in_semantics_doc(through.failures.at(0).message)) << through.failures.at(0).message;
    }
  }
}

// The same for the shared K/V buffer: cu_seqlens_k[0] = first_document_begin
// fails both the exact metadata property and the one that drives attention with
// it, and the message names the field.
TEST(PlantedBugs, KvBufferMetadataBugsAttentionShowsAlsoFailTheExactProperty) {
  int seen = 0;
  for (const PlantedBug& bug : planted::kv_buffer_bugs()) {
    if (bug.property != "kv_buffer/metadataDrivesAttentionLikeTheReference") continue;
    ++seen;
    auto backend = bug.make();
    const PropertyOutcome exact = run_property(*find_property("kv_buffer/metadataIsCanonical"), *backend, planted_settings());
    EXPECT_EQ(exact.status, PropertyOutcome::Status::failed) << bug.name;
    const PropertyOutcome through = run_property(*find_property(bug.property), *backend, planted_settings());
    ASSERT_EQ(through.status, PropertyOutcome::Status::failed) << bug.name;
    EXPECT_NE(through.failures.at(0).message.find("cu_seqlens_k[0]: backend "), std::string::npos)
        << through.failures.at(0).message;
    EXPECT_TRUE(quoted_in_semantics_doc(through.failures.at(0).message)) << through.failures.at(0).message;
  }
  EXPECT_EQ(seen, 1);
}

// ------------------------------------------------------------ bugs in the oracle
// The tolerance budget grows with the naive run's distance from the oracle, so a
// wrong oracle must be caught by the naive run's own agreement with it, in the
// property suite, against a correct backend.

// lse left in base 2 (kernels keep the softmax in exp2; the conversion back to
// natural log forgotten).
Expected<AttentionResult> dense_lse_in_base_two(const AttentionProblem& p, const AttentionInputs& in) {
  auto r = ref::attention_dense_masked(p, in);
  if (r)
    for (double& x : r.value().lse) x *= 1.4426950408889634;  // log2(e)
  return r;
}

// GQA: query head h reads kv head h % Hkv instead of h / (Hq / Hkv).
Expected<AttentionResult> per_document_gqa_modulo(const AttentionProblem& p, const AttentionInputs& in) {
  return planted::with_kv_head_modulo(p, in, ref::attention_per_document);
}

// The oracle-judged attention properties on the (correct) CPU twin, with
// `bugged` as the oracle: the failures' messages.
std::vector<std::string> failures_with_oracle(ReferenceCalls bugged) {
  register_production_backends();
  auto cpu = BackendRegistry::instance().make("cpu");
  ScopedReferenceCalls planted(bugged);
  std::vector<std::string> messages;
  // The two properties that judge a backend against each oracle.
  for (const char* id : {"attention/matchesReference", "attention/matchesPerDocumentReference"}) {
    const PropertyOutcome o = run_property(*find_property(id), *cpu, planted_settings());
    for (const PropertyFailure& f : o.failures) messages.push_back(std::string(id) + ": " + f.message);
  }
  return messages;
}

bool names_the_oracle(const std::vector<std::string>& messages) {
  for (const std::string& m : messages)
    if (m.find("oracle suspect") != std::string::npos) return true;
  return false;
}

TEST(PlantedOracleBugs, ADenseLseInBaseTwoIsCaughtAsTheOracle) {
  ReferenceCalls bugged;
  bugged.dense = dense_lse_in_base_two;
  const std::vector<std::string> messages = failures_with_oracle(bugged);
  ASSERT_FALSE(messages.empty()) << "no property failed with a wrong dense oracle";
  EXPECT_TRUE(names_the_oracle(messages)) << messages.front();
}

TEST(PlantedOracleBugs, APerDocumentGqaMisIndexIsCaughtAsTheOracle) {
  ReferenceCalls bugged;
  bugged.per_document = per_document_gqa_modulo;
  const std::vector<std::string> messages = failures_with_oracle(bugged);
  ASSERT_FALSE(messages.empty()) << "no property failed with a wrong per-document oracle";
  EXPECT_TRUE(names_the_oracle(messages)) << messages.front();
}

TEST(PlantedOracleBugs, TheCorrectOracleFailsNothing) { EXPECT_TRUE(failures_with_oracle(ReferenceCalls{}).empty()); }

// Every property of the suite has at least one planted bug.
TEST(PlantedBugs, CoverEveryProperty) {
  std::set<std::string> covered;
  for (const PlantedBug& b : all_bugs()) covered.insert(b.property);
  // Its planted bugs are in the oracle's tile arithmetic (tests/oracle_arithmetic_test.cpp).
  covered.insert("attention/oracleArithmeticMatchesScalarLoops");
  for (const PropertyDef& p : all_properties()) EXPECT_TRUE(covered.count(p.id)) << p.id << " has no planted bug";
}

}  // namespace
}  // namespace attn_oracle
