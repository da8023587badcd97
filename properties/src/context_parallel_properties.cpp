// context_parallel_properties.cpp: the properties of
// docs/semantics.md#91-context-parallelism, written once against the context-parallel capability.
// Each has a planted-bug backend in tests/planted/context_parallel_bugs.cpp that it must
// catch (tests/planted_bugs_test.cpp). The oracle is
// reference/context_parallel.hpp: the permutation derived token by token, every
// rank problem's metadata read off its explicit mask, the lse merge in float64;
// the floats are judged against the unsharded reference by the tolerance rule.
//
// Every valid draw classifies the bug classes it holds (context_parallel_generators.hpp),
// so a run prints how often each was met.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "attn_oracle/cases/context_parallel_case.hpp"
#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/context_parallel_generators.hpp"
#include "attn_oracle/properties/metadata_difference.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/reference/context_parallel.hpp"
#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle::inline properties {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

struct CpCall {
  CpLayout layout;
  AttentionProblem problem;
  AttentionInputs inputs;
  int64_t rows = 0, tokens = 0;
};

CpCall call_of(const Case& c) {
  const ContextParallelCase& cp = payload_of<ContextParallelCase>(c);
  const Expected<AttentionInputs> inputs = attention_inputs(cp.call);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  CpCall call{cp.layout, cp.call.problem, inputs.value()};
  const Shape& ids = call.problem.batch.q.segment_ids.shape;
  if (ids.size() == 2) call.rows = ids[0], call.tokens = ids[1];
  return call;
}

ContextParallelCapability& cap_of(Backend& backend) { return *backend.context_parallel(); }

// A drawn case is valid; a replayed one may not be: those are the invalid property's.
CpCall valid_call(Backend& backend, const Case& c, CheckRecord& record) {
  CpCall call = call_of(c);
  require_context_parallel_takes(backend, call.layout, call.problem);
  if (auto e = validate_cp(call.layout, call.problem))
    decline_case("not a valid layout (" + std::string(to_string(e->code)) + ": " + e->message +
                 "); invalidLayoutsAreRejectedExactly judges those");
  for (const std::string& label : cp_classes(call.layout, call.problem)) record.classify(true, label);
  if (auto e = cap_of(backend).validate_layout(call.layout, call.problem)) fail_with("rejected a valid layout: ", *e);
  return call;
}

std::string where(const CpLayout& l, int64_t rank, int64_t step) {
  std::string out = "rank " + str(rank) + ", step " + str(step);
  if (l.strategy == CpStrategy::ring) out += " (the keys of rank " + str(cp_source_rank(l, rank, step)) + ")";
  return out;
}

// The backend's permutation, which must be one.
std::vector<int64_t> backend_permutation(Backend& backend, const CpCall& call) {
  const Expected<std::vector<int64_t>> perm = cap_of(backend).permutation(call.layout, call.problem);
  if (!perm) fail_with("the permutation of a valid layout: ", perm.error());
  if (const std::string defect = permutation_defect(perm.value(), call.rows, call.tokens); !defect.empty())
    fail_case("the backend's permutation is not one: " + defect);
  return perm.value();
}

CpOptions options_of(const DrawContext& context) {
  CpOptions o;
  o.domain = context.domain;
  o.windows = context.backend.context_parallel()->token_level_mask();
  o.backward = context.backend.outputs().gradients;
  return o;
}

Case draw_valid(const DrawContext& context) { return cp_case(*cp_draw(options_of(context))); }

// ------------------------------------------------------------------- (a) the permutation
void check_reorder(Backend& backend, const CpCall& call, const std::vector<int64_t>& want_perm, const std::string& name,
                   const std::vector<double>& values, int64_t width) {
  ContextParallelCapability& cap = cap_of(backend);
  const Expected<std::vector<double>> there = cap.reorder(call.layout, call.problem, values, width, false);
  if (!there) fail_with("reorder of " + name + ": ", there.error());
  const std::vector<double> want = cp_reorder_tokens(values, want_perm, call.tokens, width, /*inverse=*/false);
  if (there->size() != want.size()) fail_case("reorder of " + name + ": " + str(there->size()) + " values, " + str(want.size()) + " due");
  for (size_t i = 0; i < want.size(); ++i)
    if (std::bit_cast<uint64_t>(there.value()[i]) != std::bit_cast<uint64_t>(want[i])) {
      const int64_t slot = static_cast<int64_t>(i / width);
      fail_case("reorder of " + name + ": row " + str(slot / call.tokens) + ", slot " + str(slot % call.tokens) +
                " should hold token " + str(want_perm[slot]) + "'s values");
    }
  const Expected<std::vector<double>> back = cap.reorder(call.layout, call.problem, there.value(), width, true);
  if (!back) fail_with("inverse reorder of " + name + ": ", back.error());
  for (size_t i = 0; i < values.size(); ++i)
    if (i >= back->size() || std::bit_cast<uint64_t>(back.value()[i]) != std::bit_cast<uint64_t>(values[i]))
      fail_case("inverse reorder of " + name + " does not restore row " + str(int64_t(i / width) / call.tokens) +
                ", token " + str(int64_t(i / width) % call.tokens));
}

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// The layout's bijection, and its reorder there and back restores every tensor.
void permutation_is_the_layouts(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = valid_call(backend, c, record);
  const std::vector<int64_t> got = backend_permutation(backend, call);
  const std::vector<int64_t> want = ref::cp_permutation(call.layout, call.problem).value();
  const int64_t local = cp_local_tokens(call.layout, call.tokens);
  for (size_t s = 0; s < want.size(); ++s)
    if (got[s] != want[s]) {
      const int64_t slot = static_cast<int64_t>(s) % call.tokens;
      fail_case("permutation: row " + str(s / call.tokens) + ", rank " + str(slot / local) + ", local slot " +
                str(slot % local) + ": backend token " + str(got[s]) + ", the layout's token " + str(want[s]));
    }
  const AttentionShape& shape = call.problem.shape;
  const int64_t qw = shape.heads_q * shape.head_dim, kw = shape.heads_kv * shape.head_dim;
  std::vector<double> tokens(call.rows * call.tokens);
  std::iota(tokens.begin(), tokens.end(), 0.0);
  check_reorder(backend, call, want, "token indices", tokens, 1);
  check_reorder(backend, call, want, "segment ids", as_doubles(call.problem.batch.q.segment_ids.data), 1);
  if (call.problem.batch.q.segment_pos.shape == call.problem.batch.q.segment_ids.shape)
    check_reorder(backend, call, want, "positions", as_doubles(call.problem.batch.q.segment_pos.data), 1);
  check_reorder(backend, call, want, "q (and o, dq)", call.inputs.q, qw);
  check_reorder(backend, call, want, "k (and dk)", call.inputs.k, kw);
  check_reorder(backend, call, want, "v (and dv)", call.inputs.v, kw);
}

// ------------------------------------------------------------------- (b) per-rank metadata
void rank_metadata_matches_the_oracle(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = valid_call(backend, c, record);
  for (int64_t rank = 0; rank < call.layout.cp; ++rank)
    for (int64_t step = 0; step < cp_steps(call.layout); ++step) {
      const std::string at = where(call.layout, rank, step);
      const Expected<Metadata> want = ref::cp_rank_metadata(call.layout, call.problem, rank, step);
      const Expected<Metadata> got = cap_of(backend).rank_metadata(call.layout, call.problem, rank, step);
      if (!want) {
        if (got) fail_case(at + ": metadata for a rank problem the oracle rejects with " + std::string(to_string(want.error().code)));
        if (got.error().code != want.error().code)
          fail_case(at + ": " + std::string(to_string(got.error().code)) + " where the oracle gives " +
                    std::string(to_string(want.error().code)) + " (" + want.error().message + ")");
        continue;
      }
      if (!got) fail_with(at + ": rejected its rank problem: ", got.error());
      if (const std::string diff = first_difference(got.value(), want.value()); !diff.empty())
        fail_case(at + ": " + diff);
    }
}

// ------------------------------------------------------------------- (c) the run
void run_matches_the_unsharded_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = valid_call(backend, c, record);
  const std::vector<int64_t> perm = backend_permutation(backend, call);
  const Expected<AttentionResult> got = cap_of(backend).cp_attention(call.layout, call.problem, call.inputs);
  if (!got) fail_with("the context-parallel run rejected a valid call: ", got.error());
  const Expected<AttentionResult> want = reference_calls().dense(call.problem, call.inputs);
  if (!want) fail_with("generator bug: the reference rejects the unsharded problem: ", want.error());
  const Expected<AttentionResult> rows = unpermute_result(call.layout, got.value(), perm, call.problem);
  if (!rows) fail_with("", rows.error());
  const std::vector<ToleranceCheck> checks =
      check_attention_tolerance(call.problem, call.inputs, rows.value(), want.value(), backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case("the run in row order vs unsharded: " + check.describe());
}

// ------------------------------------------------------------------- (d) ring steps
// The oracle's rank problem (forward) with its inputs.
struct RankRun {
  AttentionProblem problem;
  AttentionInputs inputs;
};

RankRun oracle_rank_run(const CpLayout& layout, const CpCall& call, int64_t rank, int64_t step) {
  CpRankProblem rp = ref::cp_rank_problem(layout, call.problem, rank, step).value();
  rp.problem.shape.backward = false;
  AttentionInputs in = cp_rank_inputs(rp, call.problem, call.inputs);
  in.d_o.clear();
  return {rp.problem, in};
}

void judge_rank_forward(Backend& backend, const RankRun& run, const AttentionResult& got, const std::string& what,
                        CheckRecord& record) {
  const Expected<AttentionResult> want = reference_calls().dense(run.problem, run.inputs);
  if (!want) fail_with("generator bug: the reference rejects " + what + "'s problem: ", want.error());
  const std::vector<ToleranceCheck> checks =
      check_attention_tolerance(run.problem, run.inputs, got, want.value(), backend.outputs());
  record.note(checks);
  for (const ToleranceCheck& check : checks)
    if (!check.pass) fail_case(what + ": " + check.describe());
}

// Each step's partial result is its rank problem's, and the steps merged by lse
// are the rank's queries against every key they meet.
void ring_steps_merge_to_the_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = valid_call(backend, c, record);
  const AttentionShape& shape = call.problem.shape;
  for (int64_t rank = 0; rank < call.layout.cp; ++rank) {
    AttentionResult merged;
    for (int64_t step = 0; step < cp_steps(call.layout); ++step) {
      const Expected<AttentionResult> part = cap_of(backend).rank_attention(call.layout, call.problem, call.inputs, rank, step);
      if (!part) fail_with(where(call.layout, rank, step) + ": rejected its rank problem: ", part.error());
      judge_rank_forward(backend, oracle_rank_run(call.layout, call, rank, step), part.value(), where(call.layout, rank, step),
                         record);
      if (step == 0) {
        merged = part.value();
        continue;
      }
      const int64_t local = cp_local_tokens(call.layout, call.tokens);
      ref::merge_by_lse(merged.o, merged.lse, part->o, part->lse, call.rows, local, shape.heads_q, shape.head_dim);
    }
    if (cp_steps(call.layout) == 1) continue;
    CpLayout gathered = call.layout;
    gathered.strategy = CpStrategy::all_gather;
    judge_rank_forward(backend, oracle_rank_run(gathered, call, rank, 0), merged,
                       "rank " + str(rank) + ", its " + str(call.layout.cp) + " ring steps merged by lse", record);
  }
}

// ------------------------------------------------------------------- (e) balance
std::string imbalance_label(CpBalance balance, double x) {
  const char* bucket = x <= 1.0 + 1e-9 ? "1 (exact)" : x <= 1.25 ? "<= 1.25" : x <= 1.5 ? "<= 1.5" : x <= 2 ? "<= 2" : "> 2";
  return "imbalance " + std::string(bucket) + " under " + std::string(to_string(balance));
}

// Every rank's attended pairs against the mean: reported for every draw, failed
// past the bound the backend promises for it.
void balance_within_the_declared_bound(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = valid_call(backend, c, record);
  const std::vector<int64_t> perm = backend_permutation(backend, call);
  const std::vector<int64_t> pairs = ref::cp_rank_pairs(call.layout, call.problem, perm);
  const double imbalance = ref::cp_imbalance(pairs);
  record.classify(true, imbalance_label(call.layout.balance, imbalance));
  const std::optional<double> bound = cap_of(backend).balance_bound(call.layout, call.problem);
  if (!bound || imbalance <= *bound * (1 + 1e-12)) return;
  const auto most = std::max_element(pairs.begin(), pairs.end());
  char ratio[32], promised[32];
  std::snprintf(ratio, sizeof ratio, "%.3g", imbalance);
  std::snprintf(promised, sizeof promised, "%.3g", *bound);
  fail_case("rank " + str(most - pairs.begin()) + " attends " + str(*most) + " pairs, " + ratio +
            "x the mean; the backend promises at most " + promised + "x under " +
            std::string(to_string(call.layout.balance)));
}

// ------------------------------------------------------------------- (f) invalid layouts
Case draw_invalid(const DrawContext& context) {
  const InvalidCpDraw d = *invalid_cp_draw(options_of(context));
  return with_drawn(cp_case(d.draw), {{"expected_code", std::string(to_string(d.expected))}});
}

// A layout whose preconditions fail is rejected with its code by validation, by
// the rank metadata and by the run alike (those the backend serves): a stack
// that assumes them silently fails.
void invalid_layouts_are_rejected_exactly(Backend& backend, const Case& c, CheckRecord& record) {
  const CpCall call = call_of(c);
  require_context_parallel_takes(backend, call.layout, call.problem, /*layout_sizes=*/false);
  const std::optional<Error> want = validate_cp(call.layout, call.problem);
  if (!want) decline_case("a valid layout: the other context_parallel properties judge those");
  const std::string code(to_string(want->code));
  const std::string expected = drawn_value<std::string>(c, "expected_code", code);
  record.classify(true, expected);
  if (code != expected) fail_case("generator bug: validate_cp gives " + code + " where " + expected + " was due");
  auto judge = [&](const std::string& who, const std::optional<Error>& got) {
    if (!got) fail_case(who + " accepted a layout that must give " + code + " (" + want->message + ")");
    if (got->code == ErrorCode::unsupported) decline_case("unsupported: " + got->message);
    if (got->code != want->code)
      fail_case(who + " gave " + std::string(to_string(got->code)) + " (" + got->message + ") where " + code + " (" +
                want->message + ") is due");
  };
  ContextParallelCapability& cap = cap_of(backend);
  judge("validate_layout", cap.validate_layout(call.layout, call.problem));
  if (cap.serves(CpOp::rank_metadata)) {
    const Expected<Metadata> md = cap.rank_metadata(call.layout, call.problem, 0, 0);
    judge("rank_metadata", md ? std::nullopt : std::optional<Error>(md.error()));
  }
  if (cap.serves(CpOp::run)) {
    const Expected<AttentionResult> run = cap.cp_attention(call.layout, call.problem, call.inputs);
    judge("cp_attention", run ? std::nullopt : std::optional<Error>(run.error()));
  }
}

}  // namespace

std::vector<PropertyDef> context_parallel_properties() {
  const Capability c = Capability::context_parallel;
  return {
      {"context_parallel/permutationIsTheLayoutsBijection", c,
       "the backend's permutation is the layout's, token for token, and its reorder there and back restores ids, "
       "positions, q, k and v bit for bit",
       draw_valid, permutation_is_the_layouts},
      {"context_parallel/rankMetadataMatchesTheOracle", c,
       "the metadata every rank hands its kernel at every step equals the oracle's, read off the explicit mask "
       "restricted to that rank's queries and the keys it meets",
       draw_valid, rank_metadata_matches_the_oracle, std::nullopt, {}, {}, {}, {CpOp::rank_metadata}},
      {"context_parallel/runMatchesTheUnshardedReference", c,
       "the whole run (o, lse and dq, dk, dv, dK/dV summed over the ranks), put back in row order, equals the "
       "unsharded float64 reference within tolerance",
       draw_valid, run_matches_the_unsharded_reference, std::nullopt, {}, {}, {}, {CpOp::run}},
      {"context_parallel/ringStepsMergeToTheReference", c,
       "each rank's partial result at each step is its rank problem's, and a ring's steps merged by lse are the "
       "rank's queries against every key",
       draw_valid, ring_steps_merge_to_the_reference, std::nullopt, {Output::lse}, {}, {}, {CpOp::rank_attention}},
      {"context_parallel/balanceWithinTheDeclaredBound", c,
       "every rank's attended pairs against the mean, reported per balance; within the bound the backend promises",
       draw_valid, balance_within_the_declared_bound},
      {"context_parallel/invalidLayoutsAreRejectedExactly", c,
       "a layout whose preconditions fail (cp, stripe, self-attention, heads, row and document lengths, the "
       "permutation) gives its code from validation, the rank metadata and the run alike",
       draw_invalid, invalid_layouts_are_rejected_exactly},
  };
}

}  // namespace attn_oracle::properties
