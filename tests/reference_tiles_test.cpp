// reference_tiles_test.cpp: the blocked float64 references (query tiles, Eigen
// block products; reference/src/attention_tiles.hpp) against the scalar loops
// they replaced (reference/scalar/), and their determinism.
//
//  - both references agree with their scalar versions to 1e-14 relative
//    (normwise: |a - b| <= 1e-14 max(1, max |b|) over each output tensor, lse's
//    -inf in the same places, the same error codes) on every fixture, on drawn
//    cases, and on batches whose
//    documents cut the 64-row query tiles and key blocks at every edge;
//  - results are bitwise the same for 1, 2, 3 and 8 threads and run to run,
//    the naive run of the tolerance rule's too, on rows of long documents;
//  - the explicit mask, a run of keys a query, holds exactly the pairs the rule
//    allows (the rule spelled again, pair by pair), in O(Tq) on a 16k-token row;
//  - ATTN_ORACLE_THREADS is read as documented (unset: the cores); each worker's scratch is
//    charged to the memory budget, and T = 16384, H = 8, D = 128 still fits 4 GiB.
// The comparisons are shown to fail on planted differences (one element off by
// 2e-14, an lse that is not -inf, one ulp). Under a second in release, about
// 9 s under the sanitizers (scripts/sanitize leaves out the drawn cases, 16 s more).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/model/validate.hpp"
#include "scalar_attention.hpp"

namespace attn_oracle {
namespace {

using Formulation = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);
constexpr double kAgreement = 1e-14;

struct Pair {
  const char* name;
  Formulation blocked, scalar;
};
const Pair kPairs[] = {{"dense", ref::attention_dense_masked, ref::scalar::attention_dense_masked},
                       {"per-document", ref::attention_per_document, ref::scalar::attention_per_document}};

// The first element of `a` farther from `b` than kAgreement relative to the
// tensor (normwise: max(1, max |b|)), or "". Normwise because a gradient that is
// zero in exact arithmetic comes out of either formulation as rounding noise
// of the terms that cancel (1e-14 from the scalar dense loops at D = 256, where
// the blocked ones give 0), which no elementwise relative bound can judge.
std::string first_difference(const char* name, const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    return std::string(name) + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " elements";
  double scale = 1.0;
  for (double x : b)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isinf(a[i]) || std::isinf(b[i]) ? a[i] == b[i]
                                                           : std::fabs(a[i] - b[i]) <= kAgreement * scale;
    if (!same) {
      char text[96];
      std::snprintf(text, sizeof text, "[%zu]: %.17g vs %.17g", i, a[i], b[i]);
      return name + std::string(text);
    }
  }
  return "";
}

std::string first_difference(const AttentionResult& a, const AttentionResult& b) {
  for (auto [name, x, y] : {std::tuple{"o", &a.o, &b.o}, std::tuple{"lse", &a.lse, &b.lse}})
    if (auto d = first_difference(name, *x, *y); !d.empty()) return d;
  if (a.grads.has_value() != b.grads.has_value()) return "gradients in one result only";
  if (!a.grads) return "";
  for (auto [name, x, y] : {std::tuple{"dq", &a.grads->dq, &b.grads->dq}, std::tuple{"dk", &a.grads->dk, &b.grads->dk},
                            std::tuple{"dv", &a.grads->dv, &b.grads->dv}})
    if (auto d = first_difference(name, *x, *y); !d.empty()) return d;
  return "";
}

// "" when blocked and scalar agree (results, or error codes) on the problem.
std::string disagreement(const Pair& pair, const AttentionProblem& p, const AttentionInputs& in) {
  const auto blocked = pair.blocked(p, in), scalar = pair.scalar(p, in);
  if (!blocked || !scalar) {
    if (blocked.ok() == scalar.ok() && blocked.error().code == scalar.error().code) return "";
    return std::string(pair.name) + ": blocked " + (blocked ? "ok" : to_string(blocked.error().code).data()) +
           ", scalar " + (scalar ? "ok" : to_string(scalar.error().code).data());
  }
  const std::string d = first_difference(blocked.value(), scalar.value());
  return d.empty() ? "" : std::string(pair.name) + ": " + d;
}

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

bool bitwise_equal(const AttentionResult& a, const AttentionResult& b) {
  if (!bitwise_equal(a.o, b.o) || !bitwise_equal(a.lse, b.lse) || a.grads.has_value() != b.grads.has_value())
    return false;
  return !a.grads || (bitwise_equal(a.grads->dq, b.grads->dq) && bitwise_equal(a.grads->dk, b.grads->dk) &&
                      bitwise_equal(a.grads->dv, b.grads->dv));
}

// Restores the thread setting a test changes.
struct ThreadsGuard {
  ~ThreadsGuard() { set_reference_threads(0); }
};

// ---------------------------------------------------------------------------
// Agreement with the scalar loops
// ---------------------------------------------------------------------------

TEST(BlockedReference, AgreesWithTheScalarLoopsOnEveryFixture) {
  int compared = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(ATTN_ORACLE_FIXTURES_DIR)) {
    if (!entry.path().string().ends_with(".case.json")) continue;
    const auto c = read_case_file(entry.path().string());
    if (!c) continue;  // a fixture of an unreadable file
    const AttentionCase* a = attention_fields(c->payload);
    if (!a) continue;
    const auto in = attention_inputs(*a);
    if (!in) continue;
    for (const Pair& pair : kPairs)
      EXPECT_EQ(disagreement(pair, a->problem, in.value()), "") << entry.path();
    ++compared;
  }
  EXPECT_GE(compared, 20) << "fixtures with attention inputs under " << ATTN_ORACLE_FIXTURES_DIR;
}

RC_GTEST_PROP(BlockedReference, agreesWithTheScalarLoopsOnDrawnCases, ()) {
  AttentionOptions options;
  options.batch.extra_dims = true;
  options.batch.kernel_tile_weight = 0;  // the scalar loops hold [Tq, Tkv] per head
  const AttentionDraw d = *attention_draw(options);
  const AttentionInputs in = generate_inputs(d.problem, d.seed);
  for (const Pair& pair : kPairs) RC_ASSERT(disagreement(pair, d.problem, in) == "");
}

// One side of documents with the given lengths (0: a padding token), positions from 0.
PackedSide side_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> ids, pos;
  int64_t id = 0;
  for (int64_t len : lengths) {
    if (len == 0) {
      ids.push_back(0), pos.push_back(0);
      continue;
    }
    ++id;
    for (int64_t p = 0; p < len; ++p) ids.push_back(id), pos.push_back(p);
  }
  const int64_t t = int64_t(ids.size());
  return PackedSide{IntArray({1, t}, ids), IntArray({1, t}, pos)};
}

// Documents of 1, 63, 64, 65, 129 tokens put tile and block edges inside, at and
// past document ends; cross-attention makes bottom-right drop queries.
TEST(BlockedReference, AgreesWithTheScalarLoopsWhereTilesAndBlocksCut) {
  struct Batch {
    std::vector<int64_t> q, kv;
  };
  const Batch batches[] = {{{1, 63, 64, 0, 65, 129}, {1, 63, 64, 0, 65, 129}},
                           {{70, 0, 130, 5}, {64, 0, 65, 66}}};
  const std::pair<MaskKind, Window> masks[] = {
      {MaskKind::no_mask, {}},           {MaskKind::padding_causal, {}},
      {MaskKind::padding_causal_bottom_right, {}}, {MaskKind::padding, {40, 3}},
      {MaskKind::padding_causal, {70, -1}}, {MaskKind::padding_causal_bottom_right, {17, -1}}};
  for (const Batch& b : batches)
    for (auto [mask, window] : masks) {
      AttentionProblem p;
      p.batch = PackedBatch{side_of(b.q), side_of(b.kv), mask, window, 6};
      p.shape = AttentionShape{2, 1, 5, std::nullopt, Dtype::fp32, true};  // GQA, an odd head dim
      const AttentionInputs in = generate_inputs(p, 99);
      for (const Pair& pair : kPairs)
        EXPECT_EQ(disagreement(pair, p, in), "") << to_string(mask) << " window " << window.left << "," << window.right;
    }
}

// The comparison catches what it exists for: one element 2e-14 off, an lse that
// should be -inf, an error code where the other has a result.
TEST(BlockedReference, TheComparisonCatchesPlantedDifferences) {
  AttentionProblem p;
  p.batch = PackedBatch{side_of({3, 0}), side_of({3, 0}), MaskKind::padding_causal, {}, 1};
  p.shape = AttentionShape{1, 1, 2, std::nullopt, Dtype::fp32, true};
  const AttentionInputs in = generate_inputs(p, 5);
  const AttentionResult good = ref::scalar::attention_per_document(p, in).value();
  ASSERT_EQ(first_difference(ref::attention_per_document(p, in).value(), good), "");
  AttentionResult off = good;
  double dv_scale = 1.0;
  for (double x : good.grads->dv) dv_scale = std::max(dv_scale, std::fabs(x));
  off.grads->dv[4] += 2e-14 * dv_scale;
  EXPECT_NE(first_difference(off, good).find("dv[4]"), std::string::npos);
  AttentionResult attends = good;
  attends.lse[3] = 0.0;  // token 3 is padding: -inf
  EXPECT_NE(first_difference(attends, good).find("lse[3]"), std::string::npos);
  const Pair refuses{"planted", [](const AttentionProblem&, const AttentionInputs&) -> Expected<AttentionResult> {
                       return Error{ErrorCode::over_memory_budget, "planted"};
                     },
                     ref::scalar::attention_per_document};
  EXPECT_NE(disagreement(refuses, p, in), "");
}

// ---------------------------------------------------------------------------
// Determinism and the thread knob
// ---------------------------------------------------------------------------

TEST(BlockedReference, BitwiseTheSameForEveryThreadCountAndRun) {
  ThreadsGuard guard;
  AttentionProblem p;
  const PackedSide q = side_of({70, 0, 20, 40}), kv = side_of({66, 0, 30, 40});
  auto two_rows = [](const PackedSide& s) {
    std::vector<int64_t> ids = s.segment_ids.data, pos = s.segment_pos.data;
    ids.insert(ids.end(), s.segment_ids.data.begin(), s.segment_ids.data.end());
    pos.insert(pos.end(), s.segment_pos.data.begin(), s.segment_pos.data.end());
    const int64_t t = s.segment_ids.shape[1];
    return PackedSide{IntArray({2, t}, ids), IntArray({2, t}, pos)};
  };
  p.batch = PackedBatch{two_rows(q), two_rows(kv), MaskKind::padding_causal_bottom_right, {25, -1}, 3};
  p.shape = AttentionShape{6, 3, 16, std::nullopt, Dtype::fp32, true};
  const AttentionInputs in = generate_inputs(p, 7);
  for (const Pair& pair : kPairs) {
    set_reference_threads(1);
    const AttentionResult one = pair.blocked(p, in).value();
    for (int64_t threads : {1, 2, 3, 8}) {
      set_reference_threads(threads);
      EXPECT_TRUE(bitwise_equal(pair.blocked(p, in).value(), one)) << pair.name << " on " << threads << " threads";
    }
    AttentionResult ulp = one;  // the comparison sees one ulp
    ulp.grads->dk[5] = std::nextafter(ulp.grads->dk[5], INFINITY);
    EXPECT_FALSE(bitwise_equal(ulp, one));
  }
}

// The thread count a program's edge installs from ATTN_ORACLE_THREADS
// (memory_budget.hpp), and the machine's cores without it.
TEST(BlockedReference, ThreadsComeFromTheEdgeUnlessSet) {
  ThreadsGuard guard;
  const std::pair<const char*, int64_t> readings[] = {{"3", 3}, {"1", 1},  {"0", 1},    {"-2", 1},
                                                      {"2x", 1}, {"", 1}, {"100000", 256}};
  for (auto [text, threads] : readings) {
    install_process_limits(process_limits_from({{"ATTN_ORACLE_THREADS", text}}));
    EXPECT_EQ(reference_threads(), threads) << "ATTN_ORACLE_THREADS=" << text;
  }
  set_reference_threads(5);
  EXPECT_EQ(reference_threads(), 5);
  install_process_limits(process_limits_from({}));
  EXPECT_EQ(reference_threads(), std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxReferenceThreads))
      << "unset: the machine's cores";
}

// One row of documents of 130, 200 and 300 tokens, padding between them, a
// 64-token key block that the first two share and the third starting a block
// of its own; GQA 8 query heads on each of 2 kv heads: both references and the
// naive run share it out by documents (groups of query tiles) and kv heads,
// each worker summing its own keys' gradients.
AttentionProblem documents_to_share_out(MaskKind mask) {
  std::vector<int64_t> lengths = {130, 0, 0, 200};
  lengths.insert(lengths.end(), 384 - 332, 0);
  lengths.push_back(300);
  AttentionProblem p;
  p.batch = PackedBatch{side_of(lengths), side_of(lengths), mask, {}, 3};
  p.shape = AttentionShape{16, 2, 4, std::nullopt, Dtype::bf16, true};
  return p;
}

TEST(BlockedReference, LongDocumentsGiveTheSameBitsOnEveryThreadCount) {
  ThreadsGuard guard;
  for (MaskKind mask : {MaskKind::padding_causal, MaskKind::padding}) {
    const AttentionProblem p = documents_to_share_out(mask);
    const AttentionInputs in = generate_inputs(p, 11);
    set_reference_threads(1);
    const AttentionResult dense = ref::attention_dense_masked(p, in).value();
    const AttentionResult per_document = ref::attention_per_document(p, in).value();
    const AttentionResult naive = naive_same_precision(p, in);
    for (int64_t threads : {2, 3, 8}) {
      set_reference_threads(threads);
      EXPECT_TRUE(bitwise_equal(ref::attention_dense_masked(p, in).value(), dense)) << "dense on " << threads;
      EXPECT_TRUE(bitwise_equal(ref::attention_per_document(p, in).value(), per_document)) << "per-document on " << threads;
      EXPECT_TRUE(bitwise_equal(naive_same_precision(p, in), naive)) << "naive on " << threads;
    }
  }
}

// ---------------------------------------------------------------------------
// The explicit mask, stored as runs of keys
// ---------------------------------------------------------------------------

// The rule of docs/semantics.md#2-the-attention-mask spelled again, pair by pair: the same
// id (not padding), the causal or bottom-right term on positions and the
// tokens of that id on each side, then the window.
std::vector<char> mask_by_every_pair(const PackedBatch& b, const BatchLayout& l, int64_t row) {
  const RowView q = side_row(b.q, l.q_extra, l, row), kv = side_row(b.kv, l.kv_extra, l, row);
  auto count = [](const RowView& side, int64_t t) {  // tokens of the run of equal ids around t
    int64_t first = t, end = t;
    while (first > 0 && side.ids[first - 1] == side.ids[t]) --first;
    while (end < side.len && side.ids[end] == side.ids[t]) ++end;
    return end - first;
  };
  std::vector<char> out(q.len * kv.len, 0);
  for (int64_t i = 0; i < q.len; ++i)
    for (int64_t j = 0; j < kv.len; ++j) {
      if (q.ids[i] == 0 || q.ids[i] != kv.ids[j]) continue;
      const __int128 pq = q.pos[i], pk = kv.pos[j], left = b.window.left, right = b.window.right;
      bool ok = true;
      if (is_bottom_right(b.mask)) {
        const __int128 q_from_end = count(q, i) - pq, kv_from_end = count(kv, j) - pk;
        ok = q_from_end <= kv_from_end && (b.window.left < 0 || q_from_end + left >= kv_from_end);
      } else {
        if (b.mask == MaskKind::causal || b.mask == MaskKind::padding_causal) ok = pk <= pq;
        ok = ok && (b.window.left < 0 || pk >= pq - left) && (b.window.right < 0 || pk <= pq + right);
      }
      out[i * kv.len + j] = ok;
    }
  return out;
}

RC_GTEST_PROP(ExplicitMask, runsHoldExactlyThePairsTheRuleAllows, ()) {
  const PackedBatch b = *packed_batch(BatchOptions{.max_rows = 2, .max_len = 40, .tile_edge_weight = 0});
  const BatchLayout l = validate(b).value();
  for (int64_t r = 0; r < l.rows(); ++r) {
    const ref::RowMask m = ref::explicit_mask(b, l, r, /*with_window=*/true);
    RC_ASSERT(m.dense() == mask_by_every_pair(b, l, r));
    RC_ASSERT(int64_t(m.run_start.size()) == l.q_len + 1);
    for (int64_t i = 0; i < l.q_len; ++i)
      for (const ref::KeyRun* run = m.keys_begin(i); run != m.keys_end(i); ++run) {
        RC_ASSERT(run->first >= 0 && run->first < run->end && run->end <= l.kv_len);
        if (run != m.keys_begin(i)) RC_ASSERT((run - 1)->end < run->first);  // sorted, apart
      }
  }
}

// A row of 16384 tokens (63 documents of 256 tokens, one of 255 and a padding
// token) without [Tq, Tkv]: one run of keys a query, a few hundred kilobytes
// where the flags took 256 MiB.
TEST(ExplicitMask, ALongRowIsOneRunAQuery) {
  std::vector<int64_t> lengths(63, 256);
  lengths.push_back(255);
  lengths.push_back(0);
  const PackedBatch b{side_of(lengths), side_of(lengths), MaskKind::padding_causal, {}, 64};
  const BatchLayout l = validate(b).value();
  const ref::RowMask m = ref::explicit_mask(b, l, 0, /*with_window=*/true);
  EXPECT_EQ(l.q_len, 16384);
  EXPECT_EQ(int64_t(m.runs.size()), l.q_len - 1);  // every token but the padding one
  EXPECT_TRUE(m(256 + 10, 256));
  EXPECT_TRUE(m(256 + 10, 256 + 10));
  EXPECT_FALSE(m(256 + 10, 256 + 11));
  EXPECT_FALSE(m(256 + 10, 255));
  EXPECT_FALSE(m.attends(16383));
}

// ---------------------------------------------------------------------------
// Memory budget
// ---------------------------------------------------------------------------

// T = 16384, H = 8, D = 128 in documents of 512 tokens, with backward.
AttentionProblem long_row() {
  AttentionProblem p;
  p.batch = PackedBatch{side_of(std::vector<int64_t>(32, 512)), side_of(std::vector<int64_t>(32, 512)),
                        MaskKind::causal, {}, 32};
  p.shape = AttentionShape{8, 8, 128, std::nullopt, Dtype::fp32, true};
  return p;
}

TEST(BlockedReference, LongRowsFitTheDefaultBudgetAndEveryWorkerIsCharged) {
  ThreadsGuard guard;
  set_memory_budget(int64_t{4} << 30);
  const AttentionProblem p = long_row();
  for (int64_t threads : {1, 8}) {
    set_reference_threads(threads);
    EXPECT_TRUE(validate_attention(p, nullptr, ScoreMemory::query_tiles).ok()) << threads;
    EXPECT_TRUE(validate_attention(p, nullptr, ScoreMemory::query_tiles_with_mask).ok()) << threads;
  }
  // Tensors take 1 GiB; each worker's [Tkv, D] x 6 buffers 100 MiB more.
  set_memory_budget((int64_t{1} << 30) + (int64_t{200} << 20));
  set_reference_threads(1);
  EXPECT_TRUE(validate_attention(p, nullptr, ScoreMemory::query_tiles).ok());
  set_reference_threads(8);
  const auto eight = validate_attention(p, nullptr, ScoreMemory::query_tiles);
  ASSERT_FALSE(eight.ok());
  EXPECT_EQ(eight.error().code, ErrorCode::over_memory_budget);
  EXPECT_NE(eight.error().message.find("per worker"), std::string::npos) << eight.error().message;
  // Only as many workers as there are units: here (document, kv head) pairs,
  // 32 x 8, so 64 threads are 64 workers; one document of one kv head is one.
  set_reference_threads(64);
  EXPECT_FALSE(validate_attention(p, nullptr, ScoreMemory::query_tiles).ok());
  AttentionProblem one = p;
  one.batch = PackedBatch{side_of({16384}), side_of({16384}), MaskKind::causal, {}, 1};
  one.shape.heads_kv = 1;
  EXPECT_TRUE(validate_attention(one, nullptr, ScoreMemory::query_tiles).ok());
  set_memory_budget(0);
}

// Whatever passes the default check (what judging a case takes) runs on the
// dense reference too. Here, three tokens and a head of 256, the tensors and the
// naive run's row take about 50 KB and the dense reference's tiles about 110 KB:
// a check of the naive row alone would pass at 80 KB and the reference refuse.
TEST(BlockedReference, TheDefaultCheckCoversTheDenseReference) {
  AttentionProblem p;
  p.batch = PackedBatch{side_of({3}), side_of({3}), MaskKind::padding_causal, {}, 1};
  p.shape = AttentionShape{1, 1, 256, std::nullopt, Dtype::fp32, true};
  const AttentionInputs in = generate_inputs(p, 3);
  set_memory_budget(80 << 10);
  EXPECT_FALSE(ref::attention_dense_masked(p, in).ok());
  EXPECT_FALSE(validate_attention(p, &in).ok());
  for (int64_t kib = 16; kib <= 160; kib += 8) {
    set_memory_budget(kib << 10);
    EXPECT_TRUE(!validate_attention(p, &in).ok() || ref::attention_dense_masked(p, in).ok()) << kib << " KiB";
  }
  set_memory_budget(120 << 10);
  EXPECT_TRUE(validate_attention(p, &in).ok());
  set_memory_budget(0);
}

}  // namespace
}  // namespace attn_oracle
