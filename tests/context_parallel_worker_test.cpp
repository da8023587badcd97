// context_parallel_worker_test.cpp: the context-parallel capability through a
// worker process (docs/protocol.md), every method of ContextParallelCapability:
// examples/numpy_context_parallel_backend.py answers each call as the
// reference's simulation does (permutation and rank metadata equal, floats to
// 1e-9); the optional ops go to the worker when its hello lists them and are the
// seam's otherwise (validate_cp first of all); a broken reply or hello is a
// BackendFailure naming what was wrong (tests/workers/cp_worker.py). The case
// files' eval and replay through the CLI are python_worker.context_parallel_*.
// Skipped without a python3 that imports numpy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "attn_oracle/cases/context_parallel_case.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/reference/context_parallel.hpp"
#include "attn_oracle/seam/process_backend.hpp"

namespace attn_oracle {
namespace {

const std::string kSource = ATTN_ORACLE_FIXTURES_DIR "/..";
const std::string kPython = ATTN_ORACLE_PYTHON;  // tests/CMakeLists.txt: the configure-time python3

bool python_has_numpy() {
  static const bool has = !kPython.empty() && std::system((kPython + " -c 'import numpy' 2>/dev/null").c_str()) == 0;
  return has;
}

#define REQUIRE_PYTHON()                                                                  \
  if (!python_has_numpy()) GTEST_SKIP() << "no python3 with numpy (scripts/setup installs it)"

std::string with_path(const std::string& command) {
  return "PYTHONPATH=" + kSource + "/python:" + kSource + " " + kPython + " " + command;
}
std::unique_ptr<Backend> example() {
  return make_process_backend(with_path("-m attn_oracle.worker examples.numpy_context_parallel_backend:Backend"));
}
std::unique_ptr<Backend> test_worker(const std::string& name) {
  return make_process_backend(with_path(kSource + "/tests/workers/cp_worker.py " + name));
}

// Two rows of 16 tokens whose head_tail spans split for cp 2 and 4: row 0 a
// document of 8 and one of 4 with 4 of padding after it; row 1 8 of leading
// padding, then a document of 8 at positions 3..10.
AttentionProblem problem(MaskKind mask, Window window, int64_t heads_q, int64_t heads_kv) {
  std::vector<int64_t> ids, pos;
  for (int64_t t = 0; t < 16; ++t) ids.push_back(t < 8 ? 1 : t < 12 ? 2 : 0), pos.push_back(t < 8 ? t : t < 12 ? t - 8 : 0);
  for (int64_t t = 0; t < 16; ++t) ids.push_back(t < 8 ? 0 : 1), pos.push_back(t < 8 ? 0 : t - 5);
  const PackedSide side{IntArray({2, 16}, ids), IntArray({2, 16}, pos)};
  AttentionProblem p;
  p.batch = PackedBatch{side, side, mask, window, 2};
  p.shape = AttentionShape{heads_q, heads_kv, 4, std::nullopt, Dtype::fp32, /*backward=*/true};
  return p;
}

// Each rank's tokens in row order, ranks taking every other stripe of 2 backwards.
IntArray explicit_indices(int64_t cp) {
  std::vector<int64_t> perm;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t r = 0; r < cp; ++r)
      for (int64_t t = 0; t < 16; ++t)
        if ((t / 2) % cp == cp - 1 - r) perm.push_back(t);
  return IntArray({2, 16}, perm);
}

CpLayout layout(int64_t cp, CpStrategy strategy, CpBalance balance) {
  CpLayout l;
  l.cp = cp, l.strategy = strategy, l.balance = balance;
  if (balance == CpBalance::striped) l.stripe = 2;
  if (balance == CpBalance::explicit_indices) l.indices = explicit_indices(cp);
  return l;
}

std::string describe(const Error& e) { return std::string(to_string(e.code)) + ": " + e.message; }

std::string describe(const CpLayout& l) {
  return "cp " + std::to_string(l.cp) + " " + std::string(to_string(l.strategy)) + " " + std::string(to_string(l.balance));
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i] || std::abs(got[i] - want[i]) <= 1e-9)) {
      ADD_FAILURE() << what << "[" << i << "]: worker " << got[i] << ", reference " << want[i];
      return;
    }
}

void expect_same_result(const Expected<AttentionResult>& got, const Expected<AttentionResult>& want, const std::string& what) {
  ASSERT_TRUE(got.ok()) << what << ": " << describe(got.error());
  ASSERT_TRUE(want.ok()) << what << ": " << describe(want.error());
  expect_near(got->o, want->o, what + " o");
  expect_near(got->lse, want->lse, what + " lse");
  ASSERT_EQ(got->grads.has_value(), want->grads.has_value()) << what;
  if (!got->grads) return;
  expect_near(got->grads->dq, want->grads->dq, what + " dq");
  expect_near(got->grads->dk, want->grads->dk, what + " dk");
  expect_near(got->grads->dv, want->grads->dv, what + " dv");
}

TEST(ContextParallelWorker, TheExampleAnswersEveryCallAsTheReferenceSimulation) {
  REQUIRE_PYTHON();
  const std::unique_ptr<Backend> worker = example(), reference = make_reference_backend();
  ContextParallelCapability* cap = worker->context_parallel();
  ASSERT_NE(cap, nullptr) << "the example's hello does not serve context_parallel";
  ContextParallelCapability& ref_cap = *reference->context_parallel();
  EXPECT_TRUE(cap->token_level_mask());
  const std::vector<double> values = [] {
    std::vector<double> v(2 * 16 * 3);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
    return v;
  }();
  for (const auto& [mask, window] : {std::pair{MaskKind::padding_causal, Window{}},
                                     std::pair{MaskKind::padding_causal_bottom_right, Window{2, -1}},
                                     std::pair{MaskKind::padding, Window{3, 1}}})
    for (int64_t cp : {2, 4})
      for (CpStrategy strategy : kAllCpStrategies)
        for (CpBalance balance : kAllCpBalances) {
          const CpLayout l = layout(cp, strategy, balance);
          const AttentionProblem p = problem(mask, window, 2 * cp, cp);
          const std::string what = describe(l) + ", " + std::string(to_string(mask));
          const AttentionInputs in = generate_inputs(p, 7);
          EXPECT_FALSE(cap->unsupported(l, p)) << what;
          ASSERT_FALSE(cap->validate_layout(l, p)) << what << ": " << describe(*cap->validate_layout(l, p));
          const Expected<std::vector<int64_t>> perm = cap->permutation(l, p);
          ASSERT_TRUE(perm.ok()) << what << ": " << describe(perm.error());
          EXPECT_EQ(perm.value(), cp_permutation(l, p).value()) << what;
          for (int64_t rank = 0; rank < cp; ++rank)
            for (int64_t step = 0; step < cp_steps(l); ++step) {
              const std::string at = what + ", rank " + std::to_string(rank) + ", step " + std::to_string(step);
              const Expected<Metadata> md = cap->rank_metadata(l, p, rank, step);
              ASSERT_TRUE(md.ok()) << at << ": " << describe(md.error());
              EXPECT_TRUE(md.value() == ref::cp_rank_metadata(l, p, rank, step).value()) << at;
              expect_same_result(cap->rank_attention(l, p, in, rank, step), ref_cap.rank_attention(l, p, in, rank, step), at);
            }
          expect_same_result(cap->cp_attention(l, p, in), ref_cap.cp_attention(l, p, in), what + ", the run");
          for (bool inverse : {false, true}) {
            const Expected<std::vector<double>> got = cap->reorder(l, p, values, 3, inverse);
            ASSERT_TRUE(got.ok()) << what << ": " << describe(got.error());
            EXPECT_EQ(got.value(), ref_cap.reorder(l, p, values, 3, inverse).value()) << what << ", inverse " << inverse;
          }
          EXPECT_EQ(cap->balance_bound(l, p), ref_cap.balance_bound(l, p)) << what;
        }
}

// Without validate_cp_layout the suite's validate_cp is the worker's: an invalid
// layout answers its code from every call and never reaches the example (whose
// reshape would raise).
TEST(ContextParallelWorker, WithoutItsOwnValidationTheSuiteValidatesBeforeAnyCall) {
  REQUIRE_PYTHON();
  const std::unique_ptr<Backend> worker = example();
  ContextParallelCapability& cap = *worker->context_parallel();
  const AttentionProblem p = problem(MaskKind::padding_causal, Window{}, 4, 2);
  const CpLayout three = layout(3, CpStrategy::ring, CpBalance::contiguous);
  const AttentionInputs in = generate_inputs(p, 1);
  const std::string want = describe(validate_cp(three, p).value());
  EXPECT_EQ(want, "cp_not_divisible: T = 16 is not a multiple of cp = 3");
  EXPECT_EQ(describe(cap.validate_layout(three, p).value()), want);
  EXPECT_EQ(describe(cap.permutation(three, p).error()), want);
  EXPECT_EQ(describe(cap.rank_metadata(three, p, 0, 1).error()), want);
  EXPECT_EQ(describe(cap.rank_attention(three, p, in, 0, 1).error()), want);
  EXPECT_EQ(describe(cap.cp_attention(three, p, in).error()), want);
  EXPECT_EQ(describe(cap.reorder(three, p, std::vector<double>(32), 1, false).error()), want);
}

TEST(ContextParallelWorker, TheOptionalOpsGoToTheWorkerWhenItsHelloListsThem) {
  REQUIRE_PYTHON();
  const std::unique_ptr<Backend> worker = test_worker("Hooks");
  ContextParallelCapability& cap = *worker->context_parallel();
  const AttentionProblem p = problem(MaskKind::padding_causal, Window{}, 4, 2);
  CpLayout wide = layout(2, CpStrategy::all_gather, CpBalance::striped);
  wide.stripe = 4;  // validate_cp takes it (16 is a multiple of 8); the worker does not
  ASSERT_FALSE(validate_cp(wide, p));
  const std::optional<Error> refused = cap.validate_layout(wide, p);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, ErrorCode::cp_bad_layout);
  EXPECT_EQ(refused->message, "the worker: stripe 4; this worker takes stripes up to 2");
  // The worker validates for itself, so an invalid layout reaches it.
  const Expected<std::vector<int64_t>> three = cap.permutation(layout(3, CpStrategy::ring, CpBalance::contiguous), p);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.error().code, ErrorCode::cp_not_divisible);
  EXPECT_EQ(three.error().message, "the worker: T = 16 is not a multiple of cp = 3");

  const CpLayout ring = layout(2, CpStrategy::ring, CpBalance::head_tail);
  std::vector<double> values(2 * 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  std::vector<double> negated = make_reference_backend()->context_parallel()->reorder(ring, p, values, 1, false).value();
  for (double& v : negated) v = -v;
  EXPECT_EQ(cap.reorder(ring, p, values, 1, false).value(), negated);

  EXPECT_EQ(cap.balance_bound(ring, p), std::optional<double>(1.5));
  EXPECT_EQ(cap.balance_bound(layout(2, CpStrategy::all_gather, CpBalance::head_tail), p), std::nullopt);
  EXPECT_EQ(cap.unsupported(layout(8, CpStrategy::ring, CpBalance::contiguous), p),
            std::optional<std::string>("8 ranks: this worker runs up to 4"));
  EXPECT_EQ(cap.unsupported(ring, p), std::nullopt);
}

// The message of the BackendFailure `call` throws.
template <class F>
std::string failure_of(F&& call) {
  try {
    call();
  } catch (const BackendFailure& e) {
    return e.what();
  }
  return "(no BackendFailure)";
}

TEST(ContextParallelWorker, ABrokenReplyFailsTheCallNamingWhatWasWrong) {
  REQUIRE_PYTHON();
  const AttentionProblem p = problem(MaskKind::padding_causal, Window{}, 4, 2);
  const CpLayout l = layout(2, CpStrategy::ring, CpBalance::dual_chunk_swap);
  EXPECT_EQ(failure_of([&] { test_worker("FlatPermutation")->context_parallel()->permutation(l, p); }),
            "the worker's reply to cp_permutation is malformed: permutation must be [B, T] = [2, 16], the shape of the "
            "segment ids; the reply's has shape [32]");
  EXPECT_EQ(failure_of([&] { test_worker("FloatPermutation")->context_parallel()->permutation(l, p); }),
            "the worker's reply to cp_permutation is malformed: array permutation holds f64, not integers");
  EXPECT_EQ(failure_of([&] { test_worker("ShortOutput")->context_parallel()->cp_attention(l, p, generate_inputs(p, 1)); }),
            "the worker's reply to cp_attention is malformed: o holds 480 values where [B, T, Hq, D] = [2, 16, 4, 4] "
            "holds 512");
  // A permutation that lists a token twice is well-formed: the suite names the slot.
  const Expected<std::vector<int64_t>> twice = test_worker("NotAPermutation")->context_parallel()->permutation(l, p);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(permutation_defect(twice.value(), 2, 16), "row 0, slot 1: token 0 is listed already at slot 0");
}

TEST(ContextParallelWorker, ABadHelloStopsTheSuiteNamingTheKey) {
  REQUIRE_PYTHON();
  EXPECT_NE(failure_of([] { test_worker("BadOpsHello")->context_parallel(); })
                .find("the worker's hello has context_parallel_ops [\"validate_cp_layout\",\"cp_teleport\"]: a list of "
                      "the optional context-parallel ops it answers"),
            std::string::npos);
  EXPECT_NE(failure_of([] { test_worker("BadDomainHello")->context_parallel(); })
                .find("the worker's hello has a bad domain: domain.cp_balances is [\"contiguous\",\"sideways\"]: a list "
                      "of cp balances (contiguous, dual_chunk_swap, striped, head_tail, explicit_indices), and "
                      "\"sideways\" is not one"),
            std::string::npos);
}

}  // namespace
}  // namespace attn_oracle
