// context_parallel_op.cpp: the `context_parallel` op (context_parallel_case.hpp):
// the layout field beside the attention fields; evaluation on a context-parallel
// capability (permutation, every rank's metadata at every step, the run in row
// order); judgement against the oracle (reference/context_parallel.hpp) and the
// unsharded float64 reference. Tested by tests/context_parallel_test.cpp.
#include "attn_oracle/cases/context_parallel_case.hpp"

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/cases/metadata_case.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/context_parallel.hpp"
#include "attention_fields.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;
using case_json::fail;

CpLayout parse_layout(const json& j) {
  if (!j.is_object()) fail("cp: expected an object with size, strategy and balance, found " + j.dump());
  case_json::reject_unknown_keys(j, {"size", "strategy", "balance", "stripe", "indices"}, "cp.");
  CpLayout l;
  l.cp = case_json::int_field(case_json::required(j, "size", "cp."), "cp.size");
  const json& strategy = case_json::required(j, "strategy", "cp.");
  const json& balance = case_json::required(j, "balance", "cp.");
  const auto s = strategy.is_string() ? cp_strategy_from_string(strategy.get<std::string>()) : std::nullopt;
  if (!s) fail("cp.strategy: expected all_gather, ring or all_to_all, found " + strategy.dump());
  const auto b = balance.is_string() ? cp_balance_from_string(balance.get<std::string>()) : std::nullopt;
  if (!b) fail("cp.balance: expected contiguous, dual_chunk_swap, striped, head_tail or explicit_indices, found " + balance.dump());
  l.strategy = *s;
  l.balance = *b;
  if (j.contains("stripe")) l.stripe = case_json::int_field(j["stripe"], "cp.stripe");
  if (j.contains("indices")) l.indices = case_json::parse_int_array(j["indices"], "cp.indices");
  return l;
}

json metadata_or_error(const Expected<Metadata>& md) {
  return md ? metadata_to_json(md.value()) : error_to_json(md.error());
}

// An invalid layout's cp and stripe are not asked of the domain: they are the case being judged.
std::optional<std::string> declined(Backend& backend, const ContextParallelCase& c) {
  const bool valid_layout = !validate_cp(c.layout, c.call.problem).has_value();
  if (auto reason = context_parallel_declines(backend, c.layout, c.call.problem, valid_layout))
    return declined_by(backend, *reason);
  return std::nullopt;
}

// The permutation against the oracle's, the first differing slot a failure.
void judge_permutation(const std::vector<int64_t>& got, const std::vector<int64_t>& want, int64_t t_len,
                       int64_t local, Judgement& j) {
  if (got.size() != want.size())
    return j.fail("permutation: backend has " + std::to_string(got.size()) + " slots, the layout " +
                  std::to_string(want.size()));
  for (size_t s = 0; s < got.size(); ++s)
    if (got[s] != want[s]) {
      const int64_t slot = static_cast<int64_t>(s) % t_len;
      return j.fail("permutation: row " + std::to_string(s / t_len) + ", rank " + std::to_string(slot / local) +
                    ", local slot " + std::to_string(slot % local) + ": backend token " + std::to_string(got[s]) +
                    ", the layout's " + std::to_string(want[s]));
    }
  j.note("permutation: every slot equal");
}

void judge_rank_metadata(ContextParallelCapability& cap, const ContextParallelCase& c, Judgement& j) {
  if (!cap.serves(CpOp::rank_metadata)) return j.note("rank metadata: not served by this backend");
  for (int64_t rank = 0; rank < c.layout.cp; ++rank)
    for (int64_t step = 0; step < cp_steps(c.layout); ++step) {
      const std::string where = "rank " + std::to_string(rank) + ", step " + std::to_string(step) + ": ";
      const Expected<Metadata> got = cap.rank_metadata(c.layout, c.call.problem, rank, step);
      const Expected<Metadata> want = ref::cp_rank_metadata(c.layout, c.call.problem, rank, step);
      Judgement one;
      if (!judge_errors(got, want, one)) compare_metadata(got.value(), want.value(), one, where);
      if (!one.passed()) return j.merge(one);
    }
  j.note("rank metadata: every rank and step equal");
}

class ContextParallelOp final : public TypedCaseOp<ContextParallelCase> {
 public:
  std::string_view name() const override { return "context_parallel"; }
  Capability capability() const override { return Capability::context_parallel; }

  CasePayload read(const json& j) const override {
    std::set<std::string> known = case_json::attention_keys();
    known.insert("cp");
    case_json::reject_unknown_keys(j, known);
    return ContextParallelCase{parse_layout(case_json::required(j, "cp")), case_json::parse_attention_case(j)};
  }

 protected:
  json write_fields(const ContextParallelCase& c) const override {
    json j = case_json::attention_case_to_json(c.call);
    j["cp"] = cp_layout_to_json(c.layout);
    return j;
  }

  Evaluation evaluate_on(Backend& backend, const ContextParallelCase& c) const override {
    ContextParallelCapability* cap = backend.context_parallel();
    if (!cap) return Evaluation::missing(backend, capability());
    if (auto why = declined(backend, c)) return Evaluation::declined_because(*why);
    const AttentionProblem& p = c.call.problem;
    if (auto e = cap->validate_layout(c.layout, p)) return Evaluation::of(*e);
    const Expected<AttentionInputs> inputs = attention_inputs(c.call);
    if (!inputs) return Evaluation::of(inputs.error());
    const Expected<std::vector<int64_t>> perm = cap->permutation(c.layout, p);
    if (!perm) return Evaluation::of(perm.error());
    const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
    if (const std::string defect = permutation_defect(perm.value(), rows, t_len); !defect.empty())
      return Evaluation::of(Error{ErrorCode::bad_metadata, "the backend's permutation: " + defect});
    json ranks = json::array();
    for (int64_t rank = 0; cap->serves(CpOp::rank_metadata) && rank < c.layout.cp; ++rank) {
      json steps = json::array();
      for (int64_t step = 0; step < cp_steps(c.layout); ++step)
        steps.push_back(metadata_or_error(cap->rank_metadata(c.layout, p, rank, step)));
      ranks.push_back(steps);
    }
    json out = {{"permutation", case_json::nest({rows, t_len}, perm.value())}, {"ranks", ranks}};
    if (!cap->serves(CpOp::run)) return Evaluation::of(out);
    const Expected<AttentionResult> run = cap->cp_attention(c.layout, p, inputs.value());
    if (!run) return Evaluation::of(run.error());
    const Expected<AttentionResult> rows_order = unpermute_result(c.layout, run.value(), perm.value(), p);
    if (!rows_order) return Evaluation::of(rows_order.error());
    out.update(attention_result_to_json(p, rows_order.value()));
    return Evaluation::of(out);
  }

  Judgement judge_on(Backend& backend, const ContextParallelCase& c) const override {
    Judgement j;
    ContextParallelCapability* cap = backend.context_parallel();
    if (!cap) return j.skip(missing_capability(backend, capability())), j;
    if (auto why = declined(backend, c)) return j.skip(*why), j;
    const AttentionProblem& p = c.call.problem;
    const std::optional<Error> got_e = cap->validate_layout(c.layout, p), want_e = validate_cp(c.layout, p);
    const Expected<bool> got_v = got_e ? Expected<bool>(*got_e) : Expected<bool>(true);
    const Expected<bool> want_v = want_e ? Expected<bool>(*want_e) : Expected<bool>(true);
    if (judge_errors(got_v, want_v, j)) return j;
    const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
    const Expected<std::vector<int64_t>> perm = cap->permutation(c.layout, p);
    if (!perm) return j.fail("permutation: " + describe(perm.error())), j;
    judge_permutation(perm.value(), ref::cp_permutation(c.layout, p).value(), t_len, cp_local_tokens(c.layout, t_len), j);
    judge_rank_metadata(*cap, c, j);
    if (const std::string defect = permutation_defect(perm.value(), rows, t_len); !defect.empty())
      return j.fail("the run cannot be put back in row order: " + defect), j;
    if (!cap->serves(CpOp::run)) return j.note("the run: not served by this backend"), j;
    const AttentionInputs inputs = attention_inputs(c.call).value();
    const Expected<AttentionResult> run = cap->cp_attention(c.layout, p, inputs);
    const Expected<AttentionResult> want = ref::attention_dense_masked(p, inputs);
    if (judge_errors(run, want, j)) return j;
    const Expected<AttentionResult> rows_order = unpermute_result(c.layout, run.value(), perm.value(), p);
    if (!rows_order) return j.fail(describe(rows_order.error())), j;
    judge_tolerance(check_attention_tolerance(p, inputs, rows_order.value(), want.value(), backend.outputs()), j);
    return j;
  }

  CoverageCell coverage_of(const ContextParallelCase& c) const override {
    CoverageCell cell = batch_coverage(c.call.problem.batch);
    add_shape_coverage(c.call.problem.shape, cell);
    cell.layouts.insert(c.layout.cp >= 1 ? "cp=" + std::to_string(c.layout.cp) : "cp<1");
    cell.layouts.insert(std::string(to_string(c.layout.strategy)));
    cell.layouts.insert(std::string(to_string(c.layout.balance)));
    return cell;
  }

  CaseSize size_of(const ContextParallelCase& c) const override {
    CaseSize size = batch_size(c.call.problem.batch);
    size.devices = std::max<int64_t>(c.layout.cp, 1);
    return size;
  }
};

}  // namespace

const CaseOp& context_parallel_op() {
  static const ContextParallelOp op;
  return op;
}

Expected<CpLayout> cp_layout_from_json(const json& cp) {
  try {
    return parse_layout(cp);
  } catch (const case_json::CaseFieldError& e) {
    return e.error;
  }
}

json cp_layout_to_json(const CpLayout& l) {
  json j = {{"size", l.cp}, {"strategy", std::string(to_string(l.strategy))},
            {"balance", std::string(to_string(l.balance))}};
  if (l.balance == CpBalance::striped || l.stripe != 1) j["stripe"] = l.stripe;
  if (!l.indices.data.empty() || l.balance == CpBalance::explicit_indices)
    j["indices"] = case_json::nest(l.indices.shape, l.indices.data);
  return j;
}

Expected<AttentionResult> unpermute_result(const CpLayout& l, const AttentionResult& r, const std::vector<int64_t>& perm,
                                           const AttentionProblem& p) {
  if (std::optional<Error> e = cp_result_shape_error(l, p, r, /*one_rank=*/false, /*lse_required=*/false))
    return Error{e->code, "the run's " + e->message};
  const int64_t t_len = p.batch.q.segment_ids.shape.back(), rows = static_cast<int64_t>(perm.size()) / t_len;
  const int64_t qw = p.shape.heads_q * p.shape.head_dim, kw = p.shape.heads_kv * p.shape.head_dim;
  AttentionResult out;
  out.o = cp_reorder_tokens(r.o, perm, t_len, qw, /*inverse=*/true);
  if (!r.lse.empty()) {  // [B, Hq, T]: the token axis is last
    out.lse.resize(r.lse.size());
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t h = 0; h < p.shape.heads_q; ++h)
        for (int64_t s = 0; s < t_len; ++s)
          out.lse[(b * p.shape.heads_q + h) * t_len + perm[b * t_len + s]] = r.lse[(b * p.shape.heads_q + h) * t_len + s];
  }
  if (r.grads)
    out.grads = AttentionGradients{cp_reorder_tokens(r.grads->dq, perm, t_len, qw, true),
                                   cp_reorder_tokens(r.grads->dk, perm, t_len, kw, true),
                                   cp_reorder_tokens(r.grads->dv, perm, t_len, kw, true)};
  return out;
}

std::string permutation_defect(const std::vector<int64_t>& perm, int64_t rows, int64_t t_len) {
  if (static_cast<int64_t>(perm.size()) != rows * t_len)
    return std::to_string(perm.size()) + " slots where the batch has " + std::to_string(rows) + " x " +
           std::to_string(t_len);
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<int64_t> seen(t_len, -1);
    for (int64_t s = 0; s < t_len; ++s) {
      const int64_t t = perm[b * t_len + s];
      const std::string where = "row " + std::to_string(b) + ", slot " + std::to_string(s) + ": token " + std::to_string(t);
      if (t < 0 || t >= t_len) return where + " is outside [0, " + std::to_string(t_len) + ")";
      if (seen[t] >= 0) return where + " is listed already at slot " + std::to_string(seen[t]);
      seen[t] = s;
    }
  }
  return "";
}

}  // namespace attn_oracle::cases
