// triage_test.cpp: the first run shows the bug that matters (triage.hpp).
//
// The planted backend is modelled on TransformerEngine's JAX metadata as
// shipped: vmapped extra dims raise, a row whose q or kv side has no tokens
// gets offsets one past where they belong (a shallow wrong answer, on either
// side), and under the bottom-right masks the queries that attend nothing are
// still counted in q_seqlens (the deep bug: a wrong answer on ordinary inputs,
// on some draws only). Counted one failure signature at a time, the shallow
// classes filled every slot before the deep bug's draw came.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include "attn_oracle/model/input_class.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/runner/triage.hpp"
#include "attn_oracle/model/validate.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

// Adds 1 to every offset of the rows of `side` that hold no token.
void shift_offsets_of_empty_rows(const PackedSide& side, const Shape& extra, const BatchLayout& l,
                                 std::vector<int64_t>& offsets, int64_t M) {
  for (int64_t r = 0; r < l.rows(); ++r) {
    const RowView row = side_row(side, extra, l, r);
    if (std::any_of(row.ids, row.ids + row.len, [](int64_t id) { return id != 0; })) continue;
    for (int64_t k = 0; k <= M; ++k) ++offsets[r * (M + 1) + k];
  }
}

// Under a bottom-right mask, every q token of a document counted, including
// the leading ones that attend no key; the offset moves to its first token.
void count_unattending_queries(const PackedBatch& batch, const BatchLayout& l, Metadata& m) {
  const int64_t M = m.max_segments;
  for (int64_t r = 0; r < l.rows(); ++r) {
    const RowView q = side_row(batch.q, l.q_extra, l, r);
    for (int64_t k = 0, doc = 0; k < M; ++k) {
      if (m.q_seqlens[r * M + k] == 0) continue;
      const int64_t* first = std::find(q.ids, q.ids + q.len, k + 1);
      m.q_seqlens[r * M + k] = std::count(q.ids, q.ids + q.len, k + 1);
      m.q_offsets[r * (M + 1) + doc++] = first - q.ids;
    }
  }
}

Expected<Metadata> te_like_metadata(const PackedBatch& batch, bool deep_bug) {
  if (batch.q.segment_ids.rank() > 2 || batch.kv.segment_ids.rank() > 2)
    throw std::invalid_argument("segment ids of rank " + std::to_string(batch.q.segment_ids.rank()) +
                                " given; expected [batch, seqlen]");
  auto md = ref::metadata(batch);
  if (!md) return md;
  Metadata m = md.value();
  const BatchLayout l = validate_shapes(batch).value();
  shift_offsets_of_empty_rows(batch.q, l.q_extra, l, m.q_offsets, m.max_segments);
  shift_offsets_of_empty_rows(batch.kv, l.kv_extra, l, m.kv_offsets, m.max_segments);
  if (deep_bug && is_bottom_right(batch.mask)) count_unattending_queries(batch, l, m);
  return m;
}

std::unique_ptr<Backend> te_like(bool deep_bug = true) {
  return planted::metadata_backend(deep_bug ? "planted-te-like" : "planted-te-like-shallow-only",
                                   [deep_bug](const PackedBatch& b) { return te_like_metadata(b, deep_bug); });
}

PropertyOutcome run_matches_reference(Backend& backend, uint64_t seed) {
  RunSettings s = default_run_settings();
  s.seed = seed;
  return run_property(*find_property("metadata/matchesReference"), backend, s);
}

int clusters_of_class(const PropertyOutcome& o, InputClass c) {
  return std::count_if(o.clusters.begin(), o.clusters.end(), [&](const FailureCluster& f) {
    return f.rank == FailureRank::wrong_on_input_class && f.input_class == c;
  });
}

// ------------------------------------------------------------------ the TE-like backend
class TeLikeSeeds : public testing::TestWithParam<uint64_t> {};

TEST_P(TeLikeSeeds, TheDeepWrongAnswerIsShownFirstAndEachShallowClassOnce) {
  const auto backend = te_like();
  const PropertyOutcome o = run_matches_reference(*backend, GetParam());
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_EQ(o.drawn, default_run_settings().cases) << "the run stopped before its budget";
  ASSERT_FALSE(o.clusters.empty());
  const FailureCluster& first = o.clusters.front();
  EXPECT_EQ(first.rank, FailureRank::wrong_on_ordinary_input) << first.key;
  EXPECT_TRUE(first.shown);
  ASSERT_FALSE(o.failures.empty());
  EXPECT_EQ(o.failures.front().cluster, first.key);
  EXPECT_TRUE(o.failures.front().message.starts_with("q_seqlens")) << o.failures.front().message;
  EXPECT_TRUE(input_classes_of(o.failures.front().counterexample).empty()) << "the deep bug shrank into an input class";
  EXPECT_FALSE(o.failures.front().case_path.empty());
  EXPECT_TRUE(o.failure_summary.empty()) << o.failure_summary;
  // Empty q and empty kv offsets are one cluster, with its decline; the raise on extra dims one more.
  EXPECT_EQ(clusters_of_class(o, InputClass::empty_side), 1);
  for (const FailureCluster& c : o.clusters) {
    if (c.input_class && c.rank == FailureRank::wrong_on_input_class) {
      EXPECT_NE(c.decline.find("in_input_class(batch, InputClass::"), std::string::npos) << c.decline;
    }
  }
  const auto exceptions = std::count_if(o.clusters.begin(), o.clusters.end(),
                                        [](const FailureCluster& c) { return c.rank == FailureRank::exception; });
  EXPECT_EQ(exceptions, 1);
  int draws = 0;
  for (const FailureCluster& c : o.clusters) draws += c.draws;
  EXPECT_EQ(draws, o.failed) << "every failing draw is in one cluster";
  std::cout << "seed " << GetParam() << ": " << triage_cost_line(o) << "; deep bug first at draw " << first.first_draw
            << ", " << first.draws << " draws\n";
}

INSTANTIATE_TEST_SUITE_P(FiveSeeds, TeLikeSeeds, testing::Values(kDefaultSeed, 1, 2, 3, 4));

TEST(Triage, ShallowOnlyFailuresSaySoInTheVerdict) {
  const auto backend = te_like(/*deep_bug=*/false);
  const PropertyOutcome o = run_matches_reference(*backend, kDefaultSeed);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_TRUE(std::none_of(o.clusters.begin(), o.clusters.end(), [](const FailureCluster& c) {
    return c.rank == FailureRank::wrong_on_ordinary_input;
  }));
  EXPECT_NE(o.failure_summary.find("input classes rejected or answered wrongly; no wrong answer on ordinary inputs in " +
                                   std::to_string(o.passed + o.failed) + " judged draws"),
            std::string::npos)
      << o.failure_summary;
}

TEST(Triage, ShrinkingStaysWithTheRoot) {
  Triage t(3, {}, "cpu", Capability::metadata);
  PackedBatch ordinary;
  ordinary.q.segment_ids = ordinary.kv.segment_ids = IntArray({1, 2}, {1, 1});
  ordinary.q.segment_pos = ordinary.kv.segment_pos = IntArray({1, 2}, {0, 1});
  PackedBatch empty_kv = ordinary;
  empty_kv.kv.segment_ids = IntArray({1, 2}, {0, 0});
  const Case a{MetadataCase{ordinary}, {}, {}, {}}, b{MetadataCase{empty_kv}, {}, {}, {}};
  const Triage::Draw deep = t.classify(0, "q_seqlens[0]: backend 2, expected 1", &a);
  EXPECT_TRUE(t.same_root(deep, "q_seqlens[0]: backend 1, expected 0", a));
  EXPECT_FALSE(t.same_root(deep, "cu_seqlens_q[1]: backend 1, expected 0", a)) << "into another bug";
  EXPECT_FALSE(t.same_root(deep, "kv_offsets[0]: backend 1, expected 0", b)) << "into an input class";
  EXPECT_FALSE(t.same_root(deep, "exception: boom", a)) << "into an exception";
  const Triage::Draw shallow = t.classify(1, "kv_offsets[0]: backend 1, expected 0", &b);
  EXPECT_TRUE(t.same_root(shallow, "kv_offsets[1]: backend 2, expected 1", a)) << "out of a class is fine";
}

// A document of one token that follows a document of 4 or more in its q row is
// counted as two tokens (a run-length off by one at the join). RapidCheck drops rows from
// the end, so when a later row carries it the rows before it stay.
class OneTokenJoinTwin : public Backend, public MetadataCapability {
 public:
  std::string name() const override { return "one-token-join"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    Expected<Metadata> md = ref::metadata(batch);
    if (!md || batch.q.segment_ids.shape.size() != 2) return md;
    Metadata out = md.value();
    const int64_t rows = batch.q.segment_ids.shape[0], len = batch.q.segment_ids.shape[1], m = batch.max_segments;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t* ids = batch.q.segment_ids.data.data() + r * len;
      for (int64_t t = 1; t < len; ++t)
        if (t >= 4 && ids[t] != 0 && ids[t - 1] != ids[t] && ids[t - 4] == ids[t - 1] && (t + 1 == len || ids[t + 1] != ids[t]))
          ++out.q_seqlens[r * m + ids[t] - 1];
    }
    return out;
  }
};

// metadata/matchesReference on `twin` on six seeds: each seed's first shrunk
// failure, handed to `expect` with the seed and message.
void for_each_shrunk_failure(Backend& twin, const std::function<void(const PackedBatch&, const std::string&)>& expect) {
  for (uint64_t seed : {kDefaultSeed, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{5}}) {
    RunSettings s = default_run_settings();
    s.seed = seed;
    const PropertyOutcome o = run_property(*find_property("metadata/matchesReference"), twin, s);
    ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << "seed " << seed;
    expect(o.failures.front().counterexample.as<MetadataCase>()->batch,
           "seed " + std::to_string(seed) + ": " + o.failures.front().message);
  }
}

TEST(Triage, AFailureOneRowCarriesIsShownOnThatRowAlone) {
  OneTokenJoinTwin twin;
  for_each_shrunk_failure(twin, [](const PackedBatch& b, const std::string& at) {
    EXPECT_EQ(b.q.segment_ids.shape.front(), 1) << at;
  });
}

// The same bug on a backend that takes no padding: a row that drops a document
// is grown back by its last one, so the shrink kept documents before the two
// the bug needs.
TEST(Triage, AFailureUnderAMaskWithoutPaddingKeepsOnlyTheDocumentsItNeeds) {
  struct NoPaddingTwin final : OneTokenJoinTwin {
    InputDomain domain() const override {
      InputDomain d;
      d.mask_kinds = {MaskKind::causal, MaskKind::no_mask};
      return d;
    }
  } twin;
  for_each_shrunk_failure(twin, [](const PackedBatch& b, const std::string& at) {
    EXPECT_EQ(std::set<int64_t>(b.q.segment_ids.data.begin(), b.q.segment_ids.data.end()).size(), 2u) << at;
  });
}

// A backend that declines odd lengths and is wrong on every even one from 2:
// its shrink passes through odd lengths only (a chain 8, 7, 6, ... as a length
// shrinks one token at a time), so without a detour through the declined
// candidates the shrink stopped at the drawn 8 tokens.
TEST(Triage, ShrinkingGoesOnBelowADeclinedCandidate) {
  const auto one_document = [](int64_t len) {
    PackedBatch b;
    b.mask = MaskKind::causal;
    b.max_segments = 1;
    b.q = PackedSide{IntArray({1, len}, std::vector<int64_t>(len, 1)), IntArray({1, len}, {})};
    for (int64_t t = 0; t < len; ++t) b.q.segment_pos.data.push_back(t);
    b.kv = b.q;
    return Case{MetadataCase{b}, {}, {}, {}};
  };
  const rc::Gen<int64_t> eight = [](const rc::Random&, int) {
    return rc::shrinkable::shrinkRecur<int64_t>(8, [](int64_t n) { return n > 1 ? rc::seq::just(n - 1) : rc::Seq<int64_t>(); });
  };
  const PropertyDef odd_declined{
      "metadata/oddDeclined", Capability::metadata, "declines odd lengths, wrong on even ones",
      [&](const DrawContext&) { return one_document(*eight); },
      [](Backend&, const Case& c, CheckRecord&) {
        const int64_t len = c.as<MetadataCase>()->batch.q.segment_ids.shape.back();
        if (len % 2) decline_case("an odd length");
        if (len >= 2) fail_case("q_seqlens[0, 0]: backend " + std::to_string(len + 1) + ", expected " + std::to_string(len));
      }};
  struct Reference final : Backend, MetadataCapability {
    std::string name() const override { return "reference-odd"; }
    MetadataCapability* metadata() override { return this; }
    Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  } backend;
  RunSettings s = default_run_settings();
  s.cases = 1;
  const PropertyOutcome o = run_property(odd_declined, backend, s);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_EQ(o.failures.front().counterexample.as<MetadataCase>()->batch.q.segment_ids.shape.back(), 2)
      << o.failures.front().message;
}

// A per-slot index names the same field at any rank: a vmapped draw's mismatch
// may shrink to an unbatched one without becoming another bug.
TEST(Triage, APerSlotIndexIsOneSignatureWhateverItsRank) {
  EXPECT_EQ(failure_signature("q_seqlens[0, 1, 0] (slice 0, row 1, slot 0): backend 2, expected 1"),
            failure_signature("q_seqlens[1, 0] (row 1, slot 0): backend 3, expected 1"));
  EXPECT_EQ(failure_signature("q_seqlens[1, 0] (row 1, slot 0): backend 3, expected 1"), "q_seqlens[#]");
  EXPECT_NE(failure_signature("q_seqlens[1, 0] (row 1, slot 0): backend 3, expected 1"),
            failure_signature("kv_seqlens[1, 0] (row 1, slot 0): backend 3, expected 1"));
}

TEST(Triage, ExceptionsClusterByTheirMessageWithValuesFolded) {
  EXPECT_EQ(cluster_of_message("the worker's backend raised ValueError in metadata: shape (2, 3) vs (4,)", 0).key,
            cluster_of_message("the worker's backend raised ValueError in metadata: shape (5, 1) vs (2,)", 7).key);
  EXPECT_EQ(cluster_of_message("exception: boom", 0).rank, FailureRank::exception);
  EXPECT_EQ(cluster_of_message("backend rejected a valid input: bad_segment_ids (row 0)", 0).rank, FailureRank::exception);
  const FailureCluster crash = cluster_of_message("the backend crashed or hung while this case was checked: SIGSEGV (signal 11)", 3);
  EXPECT_EQ(crash.rank, FailureRank::crash);
  EXPECT_EQ(crash.key, "crash: SIGSEGV");
}

TEST(Triage, DeclinesAreWrittenInTheBackendsLanguage) {
  EXPECT_EQ(decline_line("cpu", Capability::metadata, InputClass::extra_dims),
            "decline in MetadataCapability::unsupported(const PackedBatch& batch): "
            "if (in_input_class(batch, InputClass::extra_dims)) return \"vmapped extra dims\"; "
            "(or declare it: InputDomain::extra_dims = false)");
  EXPECT_EQ(decline_line("exec:python3 -m attn_oracle.worker m:B", Capability::attention, InputClass::extra_dims),
            "decline in def unsupported_attention(self, problem): if problem.batch.q_segment_ids.ndim > 2 or "
            "problem.batch.kv_segment_ids.ndim > 2: return \"vmapped extra dims\"  "
            "(or declare it: domain = Domain(extra_dims=False))");
  EXPECT_NE(decline_line("exec:./my_worker", Capability::metadata, InputClass::empty_side).find("\"unsupported\""),
            std::string::npos);
  EXPECT_EQ(decline_line("cpu", Capability::kv_buffer, InputClass::empty_side), "") << "no hook sees a batch";
}

TEST(Triage, RankingShowsTheHighestRankedClustersAndKeepsTheRestAsLines) {
  PropertyOutcome o;
  o.failed = 6;
  auto failure = [](std::string cluster) {
    PropertyFailure f;
    f.cluster = std::move(cluster);
    return f;
  };
  o.clusters = {{"exception: x", FailureRank::exception, {}, "", 3, 0, "x", "", false},
                {"input class: a side with no tokens", FailureRank::wrong_on_input_class, InputClass::empty_side, "d", 2, 1, "y", "", false},
                {"wrong answer: q_seqlens[#]", FailureRank::wrong_on_ordinary_input, {}, "", 1, 9, "z", "", false}};
  o.failures = {failure("exception: x"), failure("input class: a side with no tokens"), failure("wrong answer: q_seqlens[#]")};
  rank_failures(o, 2);
  ASSERT_EQ(o.failures.size(), 2u);
  EXPECT_EQ(o.failures[0].cluster, "wrong answer: q_seqlens[#]");
  EXPECT_EQ(o.failures[1].cluster, "input class: a side with no tokens");
  EXPECT_FALSE(o.clusters[2].shown);
  const auto entries = triage_entries(o);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2].failure, nullptr);
  EXPECT_EQ(entries[2].heading, "[3] exception or rejection, 3 draws from draw 0");
  rank_failures(o, 2);  // again, as the supervising process does after merging
  EXPECT_EQ(o.failures.size(), 2u);
}

TEST(InputClasses, OfBatches) {
  PackedBatch b;
  b.q.segment_ids = b.kv.segment_ids = IntArray({1, 2}, {1, 1});
  b.q.segment_pos = b.kv.segment_pos = IntArray({1, 2}, {0, 1});
  EXPECT_TRUE(input_classes(b).empty());
  PackedBatch empty = b;
  empty.q.segment_ids = IntArray({1, 0}, {});
  empty.q.segment_pos = IntArray({1, 0}, {});
  EXPECT_EQ(input_classes(empty), std::vector{InputClass::empty_side});
  PackedBatch vmapped = b;
  vmapped.kv.segment_ids = IntArray({1, 1, 2}, {1, 1});
  EXPECT_EQ(input_classes(vmapped), std::vector{InputClass::extra_dims});
  PackedBatch far = b;
  far.q.segment_pos = IntArray({1, 2}, {int64_t{1} << 31, (int64_t{1} << 31) + 1});
  EXPECT_EQ(input_classes(far), std::vector{InputClass::int_limits});
  far.window = {int64_t{1} << 40, 0};
  far.q.segment_pos = b.q.segment_pos;
  EXPECT_EQ(input_classes(far), std::vector{InputClass::int_limits});
}

}  // namespace
}  // namespace attn_oracle
