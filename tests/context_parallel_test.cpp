// context_parallel_test.cpp: context parallelism (docs/semantics.md#91-context-parallelism):
// the layouts' permutations by hand, the validator's codes and precedence, the
// oracle's rank metadata by hand, the generators (valid draws validate, invalid
// ones give their code, the bug classes are met), the case op, and the
// properties on the reference and cpu backends.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <numeric>

#include "builtin_backends.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/properties/context_parallel_generators.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/context_parallel.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/seam/context_parallel.hpp"
#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle {
namespace {

// One row of `ids` (positions from 0 in each document), self-attention.
AttentionProblem row_problem(const std::vector<int64_t>& ids, MaskKind mask = MaskKind::padding_causal,
                             int64_t heads = 1) {
  const int64_t t = static_cast<int64_t>(ids.size());
  std::vector<int64_t> pos(t, 0);
  for (int64_t i = 1; i < t; ++i) pos[i] = ids[i] != 0 && ids[i] == ids[i - 1] ? pos[i - 1] + 1 : 0;
  AttentionProblem p;
  p.batch.q = p.batch.kv = PackedSide{IntArray({1, t}, ids), IntArray({1, t}, pos)};
  p.batch.mask = mask;
  p.batch.max_segments = std::max<int64_t>(1, *std::max_element(ids.begin(), ids.end()));
  p.shape.heads_q = p.shape.heads_kv = heads;
  p.shape.head_dim = 4;
  return p;
}

CpLayout layout(int64_t cp, CpBalance balance, CpStrategy strategy = CpStrategy::all_gather, int64_t stripe = 1) {
  CpLayout l;
  l.cp = cp, l.balance = balance, l.strategy = strategy, l.stripe = stripe;
  return l;
}

std::vector<int64_t> perm(const CpLayout& l, const AttentionProblem& p) {
  const Expected<std::vector<int64_t>> m = cp_permutation(l, p), r = ref::cp_permutation(l, p);
  EXPECT_TRUE(m.ok() && r.ok());
  if (!m || !r) return {};
  EXPECT_EQ(m.value(), r.value()) << "the model's chunks and the oracle's tokens disagree";
  return m.value();
}

ErrorCode code_of(const CpLayout& l, const AttentionProblem& p) {
  const std::optional<Error> e = validate_cp(l, p);
  EXPECT_TRUE(e.has_value()) << "accepted";
  return e ? e->code : ErrorCode::bad_case;
}

const std::vector<int64_t> kEight = {1, 1, 1, 1, 1, 1, 1, 1};

TEST(CpLayout, EachBalanceByHand) {
  const AttentionProblem one_doc = row_problem(kEight);
  using V = std::vector<int64_t>;
  EXPECT_EQ(perm(layout(2, CpBalance::contiguous), one_doc), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(perm(layout(2, CpBalance::dual_chunk_swap), one_doc), (V{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(perm(layout(4, CpBalance::dual_chunk_swap), one_doc), (V{0, 7, 1, 6, 2, 5, 3, 4}));
  EXPECT_EQ(perm(layout(2, CpBalance::striped, CpStrategy::ring, 2), one_doc), (V{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_EQ(perm(layout(2, CpBalance::striped, CpStrategy::ring, 1), one_doc), (V{0, 2, 4, 6, 1, 3, 5, 7}));
  // head_tail: each document (with the padding after it) in 2*cp chunks.
  EXPECT_EQ(perm(layout(2, CpBalance::head_tail), row_problem({1, 1, 1, 1, 2, 2, 0, 0})), (V{0, 3, 4, 7, 1, 2, 5, 6}));
  CpLayout explicit_layout = layout(2, CpBalance::explicit_indices);
  explicit_layout.indices = IntArray({1, 4}, {1, 3, 0, 2});
  EXPECT_EQ(cp_permutation(explicit_layout, row_problem({1, 1, 1, 1})).value(), (V{1, 3, 0, 2}));
}

TEST(CpLayout, EveryCodeInItsOrder) {
  const AttentionProblem ok = row_problem(kEight);
  EXPECT_EQ(code_of(layout(0, CpBalance::contiguous), ok), ErrorCode::cp_bad_layout);
  EXPECT_EQ(code_of(layout(2, CpBalance::striped, CpStrategy::ring, 0), ok), ErrorCode::cp_bad_layout);
  CpLayout stray = layout(2, CpBalance::contiguous);
  stray.indices = IntArray({1, 8}, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(code_of(stray, ok), ErrorCode::cp_bad_layout);
  AttentionProblem cross = ok;
  cross.batch.kv.segment_pos.data[7] = 9;
  EXPECT_EQ(code_of(layout(2, CpBalance::contiguous), cross), ErrorCode::cp_not_self_attention);
  EXPECT_EQ(code_of(layout(2, CpBalance::contiguous, CpStrategy::all_to_all), row_problem(kEight, MaskKind::causal, 3)),
            ErrorCode::cp_heads_not_divisible);
  EXPECT_EQ(code_of(layout(3, CpBalance::contiguous), ok), ErrorCode::cp_not_divisible);
  EXPECT_EQ(code_of(layout(4, CpBalance::dual_chunk_swap), row_problem({1, 1, 1, 1})), ErrorCode::cp_not_divisible);
  EXPECT_EQ(code_of(layout(2, CpBalance::striped, CpStrategy::ring, 3), ok), ErrorCode::cp_not_divisible);
  const std::optional<Error> span = validate_cp(layout(2, CpBalance::head_tail), row_problem({1, 1, 1, 2, 2, 2, 2, 2}));
  ASSERT_TRUE(span);
  EXPECT_EQ(span->code, ErrorCode::cp_document_not_divisible);
  EXPECT_EQ(span->message, "row 0, document 1 with the padding after it (tokens 0..2): length 3 is not a multiple of "
                           "2*cp = 4 (head_tail)");
  CpLayout dup = layout(2, CpBalance::explicit_indices);
  dup.indices = IntArray({1, 4}, {0, 0, 1, 2});
  EXPECT_EQ(code_of(dup, row_problem({1, 1, 1, 1})), ErrorCode::cp_bad_permutation);
  dup.indices = IntArray({1, 4}, {1, 0, 2, 3});  // rank 0 out of row order
  EXPECT_EQ(code_of(dup, row_problem({1, 1, 1, 1})), ErrorCode::cp_bad_permutation);
  // Layout before problem before divisibility.
  AttentionProblem bad = ok;
  bad.shape.heads_kv = 3;
  EXPECT_EQ(code_of(layout(0, CpBalance::contiguous), bad), ErrorCode::cp_bad_layout);
  EXPECT_EQ(code_of(layout(3, CpBalance::contiguous), bad), ErrorCode::bad_heads);
}

TEST(CpOracle, RankMetadataOfARingByHand) {
  // One causal document of 4 tokens over 2 ranks, contiguous: rank 1 meets rank 0's
  // keys at step 1 and attends all of them; rank 0 meets rank 1's and attends none.
  const AttentionProblem p = row_problem({1, 1, 1, 1}, MaskKind::causal);
  const CpLayout ring = layout(2, CpBalance::contiguous, CpStrategy::ring);
  const Metadata r1s1 = ref::cp_rank_metadata(ring, p, 1, 1).value();
  EXPECT_EQ(r1s1.q_seqlens, (std::vector<int64_t>{2}));
  EXPECT_EQ(r1s1.cu_seqlens_kv, (std::vector<int64_t>{0, 2}));
  const Metadata r0s1 = ref::cp_rank_metadata(ring, p, 0, 1).value();
  EXPECT_EQ(r0s1.q_seqlens, (std::vector<int64_t>{0}));
  EXPECT_EQ(r0s1.cu_seqlens_q, (std::vector<int64_t>{0}));
  // All-gather under dual_chunk_swap: rank 0 holds tokens 0 and 3 and meets keys 0..3.
  const Metadata ag = ref::cp_rank_metadata(layout(2, CpBalance::dual_chunk_swap), p, 0, 0).value();
  EXPECT_EQ(ag.q_seqlens, (std::vector<int64_t>{2}));
  EXPECT_EQ(ag.kv_seqlens, (std::vector<int64_t>{4}));
  // Causal pairs: rank 0 holds queries 0 and 3 (1 + 4 keys), rank 1 queries 1 and 2 (2 + 3).
  EXPECT_EQ(ref::cp_rank_pairs(layout(2, CpBalance::dual_chunk_swap), p, perm(layout(2, CpBalance::dual_chunk_swap), p)),
            (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(ref::cp_rank_pairs(ring, p, perm(ring, p)), (std::vector<int64_t>{3, 7}));
}

TEST(CpOracle, MergeByLseOfTwoHalvesIsTheWhole) {
  // One query, keys split in two: softmax weights e^0, e^1 | e^2 with values 1, 2 | 3.
  std::vector<double> o = {(1.0 + 2.0 * std::exp(1.0)) / (1 + std::exp(1.0))}, lse = {std::log(1 + std::exp(1.0))};
  ref::merge_by_lse(o, lse, {3.0}, {2.0}, 1, 1, 1, 1);
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(o[0], (1 + 2 * std::exp(1.0) + 3 * std::exp(2.0)) / z, 1e-15);
  EXPECT_NEAR(lse[0], std::log(z), 1e-15);
  std::vector<double> none = {0.0}, none_lse = {-INFINITY};
  ref::merge_by_lse(none, none_lse, {0.0}, {-INFINITY}, 1, 1, 1, 1);
  EXPECT_EQ(none[0], 0.0);
  EXPECT_EQ(none_lse[0], -INFINITY);
}

// ------------------------------------------------------------------- generators
template <class T>
std::vector<T> sample(rc::Gen<T> gen, int n) {
  std::vector<T> out;
  for (int i = 0; i < n; ++i) out.push_back(gen(rc::Random(1000 + i), 30 + i % 70).value());
  return out;
}

TEST(CpGenerators, ValidDrawsValidateAndMeetEveryClass) {
  std::map<std::string, int> seen;
  for (const CpDraw& d : sample(cp_draw(CpOptions{}), 600)) {
    const std::optional<Error> e = validate_cp(d.layout, d.problem);
    ASSERT_FALSE(e) << to_string(e->code) << ": " << e->message;
    for (const std::string& label : cp_classes(d.layout, d.problem)) ++seen[label];
  }
  for (const char* label : {"cp=2", "cp=3", "cp=4", "cp=8", "ring / head_tail", "all_to_all / striped", "stripe 1",
                            "stripe 64", "stripe 128", "1-token document", "odd document",
                            "document at a multiple of 2*cp", "document one below a multiple of 2*cp",
                            "document one above a multiple of 2*cp", "document one above a multiple of cp*stripe",
                            "document straddles a chunk boundary", "document starts on a chunk boundary",
                            "document ends on a chunk boundary", "padding at the tail", "padding between documents",
                            "several documents a row", "rows of different structure", "window", "backward",
                            "causal_bottom_right"})
    EXPECT_GT(seen[label], 0) << label << " never drawn";
  for (const auto& [label, n] : seen) std::cout << "[ cp mix ] " << label << ": " << n << "\n";
}

TEST(CpGenerators, InvalidDrawsGiveExactlyTheirCode) {
  std::map<std::string, int> codes;
  for (const InvalidCpDraw& d : sample(invalid_cp_draw(CpOptions{}), 400)) {
    const std::optional<Error> e = validate_cp(d.draw.layout, d.draw.problem);
    ASSERT_TRUE(e) << "accepted, expecting " << to_string(d.expected);
    EXPECT_EQ(e->code, d.expected) << e->message;
    ++codes[std::string(to_string(d.expected))];
  }
  EXPECT_EQ(codes.size(), 6u);
}

// A stack that takes self-attention only is given the other broken preconditions, not
// cross-attention, which its domain declines.
TEST(CpGenerators, InvalidDrawsStayInsideASelfAttentionDomain) {
  CpOptions o;
  o.domain.self_attention_only = true;
  for (const InvalidCpDraw& d : sample(invalid_cp_draw(o), 200)) {
    EXPECT_NE(d.expected, ErrorCode::cp_not_self_attention);
    EXPECT_FALSE(outside_domain(o.domain, d.draw.problem)) << *outside_domain(o.domain, d.draw.problem);
  }
}

TEST(CpGenerators, DrawInsideTheDomain) {
  CpOptions o;
  o.domain.cp_balances = {CpBalance::head_tail};
  o.domain.cp_strategies = {CpStrategy::ring};
  o.domain.cp_sizes = {2, 4};
  o.domain.mask_kinds = {MaskKind::causal};
  for (const CpDraw& d : sample(cp_draw(o), 100)) {
    EXPECT_FALSE(outside_domain(o.domain, d.layout, d.problem)) << *outside_domain(o.domain, d.layout, d.problem);
    EXPECT_FALSE(validate_cp(d.layout, d.problem));
  }
}

// A compiled stack (jit, torch.compile) compiles once per shape: on a size menu,
// every draw whose layout has a length on the menu takes it.
TEST(CpGenerators, ShapeStableDrawsKeepToTheMenu) {
  CpOptions o;
  o.domain.sizes = default_size_menu();
  int on_menu = 0, drawn = 0;
  for (const CpDraw& d : sample(cp_draw(o), 200)) {
    ASSERT_FALSE(validate_cp(d.layout, d.problem));
    ++drawn;
    const auto why = outside_domain(o.domain, d.layout, d.problem);
    on_menu += !why;
    if (why) std::cout << "[ cp menu ] off: " << *why << "\n";
  }
  std::cout << "[ cp menu ] " << on_menu << " of " << drawn << " draws on the default size menu\n";
  EXPECT_GE(on_menu * 10, drawn * 7);
}

// ------------------------------------------------------------------- the case op
TEST(CpCase, RoundTripsAndEvaluates) {
  register_builtin_backends();
  CpDraw d;
  d.layout = layout(2, CpBalance::dual_chunk_swap, CpStrategy::ring);
  d.problem = row_problem({1, 1, 1, 1, 2, 2, 2, 2}, MaskKind::causal);
  d.seed = 7;
  const Case c = cp_case(d);
  const Expected<Case> back = case_from_json(case_to_json(c));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), c);
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = BackendRegistry::instance().make(name);
    const Evaluation e = op_of(c).evaluate(*backend, c.payload);
    ASSERT_EQ(e.kind, Evaluation::Kind::result) << e.output.dump();
    EXPECT_EQ(e.output["permutation"], nlohmann::json::parse("[[0,1,6,7,2,3,4,5]]"));
    EXPECT_EQ(e.output["ranks"].size(), 2u);
    EXPECT_EQ(e.output["ranks"][0].size(), 2u) << "a ring has cp steps";
    EXPECT_EQ(op_of(c).judge(*backend, c.payload).status, Judgement::Status::pass) << name;
  }
}

TEST(CpCase, ReadingErrorsNameTheField) {
  nlohmann::json j = case_to_json(cp_case(CpDraw{layout(2, CpBalance::contiguous), row_problem({1, 1}), 1}));
  j["cp"]["strategy"] = "zigzag";
  const Expected<Case> bad = case_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("cp.strategy"), std::string::npos) << bad.error().message;
}

// A kernel backend's blocks carry no positions: a window is declined, not misjudged.
TEST(CpSimulation, KernelBackendsDeclineWindows) {
  register_builtin_backends();
  auto cpu = BackendRegistry::instance().make("cpu");
  AttentionProblem p = row_problem({1, 1, 1, 1}, MaskKind::causal);
  p.batch.window = Window{1, -1};
  EXPECT_TRUE(cpu->context_parallel()->unsupported(layout(2, CpBalance::contiguous), p));
  EXPECT_FALSE(BackendRegistry::instance().make("reference")->context_parallel()->unsupported(layout(2, CpBalance::contiguous), p));
}

// ------------------------------------------------------------------- properties
// A backend whose every rank runs the reference, with context parallelism `Simulation` over it.
template <class Simulation>
class OverReference : public Backend, MetadataCapability, AttentionCapability {
 public:
  explicit OverReference(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return ref::attention_dense_masked(p, in);
  }
  bool token_level_mask() const override { return true; }
  ContextParallelCapability* context_parallel() override { return &cp_; }

 private:
  std::string name_;
  Simulation cp_{static_cast<AttentionCapability&>(*this), static_cast<MetadataCapability&>(*this)};
};

// Serves the permutation and metadata but not the run (a stack whose kernels need a
// device): the properties that call the run are skipped with the reason.
class RankMetadataOnly final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  bool serves(CpOp op) const override { return op == CpOp::rank_metadata; }
};

class MetadataOnly final : public OverReference<RankMetadataOnly> {
 public:
  MetadataOnly() : OverReference("metadata-only") {}
  Expected<AttentionResult> attention(const AttentionProblem&, const AttentionInputs&) override {
    ADD_FAILURE() << "a property called attention on a backend that serves no run";
    return Error{ErrorCode::unsupported, "no run"};
  }
};

TEST(CpProperties, ThoseCallingAnOpTheBackendDoesNotServeAreSkippedWithTheReason) {
  MetadataOnly backend;
  for (const PropertyDef& p : context_parallel_properties()) {
    const PropertyOutcome o = run_property(p, backend, default_run_settings());
    const bool calls_attention = !p.needs_cp_ops.empty() && p.needs_cp_ops.front() != CpOp::rank_metadata;
    if (!calls_attention) {
      EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << p.id << ": " << o.message;
      continue;
    }
    EXPECT_EQ(o.status, PropertyOutcome::Status::skipped) << p.id;
    EXPECT_NE(o.message.find("serves context_parallel without"), std::string::npos) << o.message;
  }
}

// A run whose o holds one token too few (a C++ backend, where no wire reply is checked): the
// suite un-permutes by index, so the run fails with the sizes named, not with a read past its end.
class RunOneTokenShort final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<AttentionResult> cp_attention(const CpLayout& l, const AttentionProblem& p, const AttentionInputs& in) override {
    Expected<AttentionResult> r = SimulatedContextParallel::cp_attention(l, p, in);
    if (r) r.value().o.resize(r.value().o.size() - p.shape.heads_q * p.shape.head_dim);
    return r;
  }
};

TEST(CpProperties, ARunOfTheWrongSizeFailsNamingItsSizes) {
  OverReference<RunOneTokenShort> backend("run-one-token-short");
  const PropertyOutcome o =
      run_property(*find_property("context_parallel/runMatchesTheUnshardedReference"), backend, default_run_settings());
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << o.message;
  ASSERT_FALSE(o.failures.empty());
  const std::string& message = o.failures.front().message;
  EXPECT_NE(message.find("bad_tensor_shape (the run's o holds"), std::string::npos) << message;
}

TEST(CpProperties, PassOnTheReferenceAndCpuBackends) {
  register_builtin_backends();
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = BackendRegistry::instance().make(name);
    for (const PropertyDef& p : context_parallel_properties()) {
      const PropertyOutcome o = run_property(p, *backend, default_run_settings());
      EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << name << " " << p.id << ": " << o.message;
      std::cout << "[ context_parallel ] " << p.id << " on " << name << ": " << to_string(o.status) << ", "
                << o.passed << " of " << o.drawn << " draws passed\n";
    }
  }
}

}  // namespace
}  // namespace attn_oracle
