// attention_op.cpp: the `attention` and `small_seq` ops (attention_case.hpp):
// their shared fields (batch, shape, data seed or tensors), evaluation on the
// attention / small-seq capability, judgement by the tolerance rule against
// the float64 references, and coverage.
// Tested by tests/case_file_test.cpp, tests/fixtures_test.cpp and tests/cli_test.cpp.
#include "attn_oracle/cases/attention_case.hpp"

#include <algorithm>

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/cases/small_seq_checks.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attention_fields.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;
using case_json::fail;
using case_json::required;

// The nested shapes of q (k, v) for a valid problem: extra + [B, T, H, D].
struct TensorShapes {
  Shape q, kv;
};

std::optional<TensorShapes> tensor_shapes(const AttentionProblem& p) {
  const auto layout = validate_shapes(p.batch);
  if (!layout) return std::nullopt;
  const BatchLayout& l = layout.value();
  TensorShapes t{l.extra, l.extra};
  t.q.insert(t.q.end(), {l.batch, l.q_len, p.shape.heads_q, p.shape.head_dim});
  t.kv.insert(t.kv.end(), {l.batch, l.kv_len, p.shape.heads_kv, p.shape.head_dim});
  return t;
}

std::vector<double> parse_tensor(const json& tensors, const char* name, const Shape* expected) {
  const std::string path = std::string("tensors.") + name;
  Shape shape;
  std::vector<double> data = case_json::parse_double_array(required(tensors, name, "tensors."), path, shape);
  if (expected && shape != *expected)
    fail(ErrorCode::bad_tensor_shape,
         path + ": shape " + shape_to_string(shape) + ", expected " + shape_to_string(*expected));
  return data;
}

AttentionInputs parse_tensors(const json& j, const AttentionProblem& problem) {
  if (!j.is_object()) fail("tensors: expected an object with q, k, v (and do)");
  const bool backward = problem.shape.backward;
  if (!backward && j.contains("do")) fail("tensors.do: given but backward is false");
  case_json::reject_unknown_keys(j, {"q", "k", "v", "do"}, "tensors.");
  // Shapes are compared only when the problem is valid: otherwise the
  // validator's own code (which takes precedence) is what eval reports.
  std::optional<TensorShapes> shapes;
  if (validate_attention(problem)) shapes = tensor_shapes(problem);
  const Shape* q_shape = shapes ? &shapes->q : nullptr;
  const Shape* kv_shape = shapes ? &shapes->kv : nullptr;
  AttentionInputs in;
  in.q = parse_tensor(j, "q", q_shape);
  in.k = parse_tensor(j, "k", kv_shape);
  in.v = parse_tensor(j, "v", kv_shape);
  if (backward) in.d_o = parse_tensor(j, "do", q_shape);
  return in;
}

// q's nested shape, and lse's: extra + [B, Tq] -> extra + [B, Hq, Tq]; flat lists
// ({-1} never matches) when the problem has no valid shape.
struct ResultShapes {
  Shape q{-1}, kv{-1}, lse{-1};
};

ResultShapes result_shapes(const AttentionProblem& problem) {
  ResultShapes r;
  if (const auto shapes = tensor_shapes(problem)) {
    r.q = shapes->q, r.kv = shapes->kv;
    r.lse = Shape(r.q.begin(), r.q.end() - 2);
    r.lse.insert(r.lse.end() - 1, problem.shape.heads_q);
  }
  return r;
}

void add_gradients(json& j, const ResultShapes& s, const std::optional<AttentionGradients>& grads) {
  if (!grads) return;
  j["dq"] = case_json::nest(s.q, grads->dq);
  j["dk"] = case_json::nest(s.kv, grads->dk);
  j["dv"] = case_json::nest(s.kv, grads->dv);
}

CoverageCell attention_coverage(const AttentionCase& c) {
  CoverageCell cell = batch_coverage(c.problem.batch);
  add_shape_coverage(c.problem.shape, cell);
  add_tile_edge_coverage(c.problem, cell);
  return cell;
}

// ---------------------------------------------------------------------------
// attention
// ---------------------------------------------------------------------------

class AttentionOp final : public TypedCaseOp<AttentionCase> {
 public:
  std::string_view name() const override { return "attention"; }
  Capability capability() const override { return Capability::attention; }
  CasePayload read(const json& j) const override {
    case_json::reject_unknown_keys(j, case_json::attention_keys());
    return case_json::parse_attention_case(j);
  }
  double expected_tolerance() const override { return 1e-12; }

 protected:
  json write_fields(const AttentionCase& c) const override { return case_json::attention_case_to_json(c); }

  Evaluation evaluate_on(Backend& backend, const AttentionCase& c) const override {
    AttentionCapability* cap = backend.attention();
    if (!cap) return Evaluation::missing(backend, capability());
    const Expected<AttentionInputs> inputs = attention_inputs(c);
    if (!inputs) return Evaluation::of(inputs.error());
    // An invalid problem is asked of the domain alone (backend_takes.hpp), then goes to
    // attention(), which must reject it with the code of docs/semantics.md#4-error-codes.
    const bool valid = validate_attention(c.problem, &inputs.value()).ok();
    if (auto reason = valid ? attention_declines(backend, c.problem) : domain_declines(backend, c.problem))
      return Evaluation::declined_because(declined_by(backend, *reason));
    const Expected<AttentionResult> r = cap->attention(c.problem, inputs.value());
    if (!r) return Evaluation::of(r.error());
    return Evaluation::of(attention_result_to_json(c.problem, r.value()));
  }

  Judgement judge_on(Backend& backend, const AttentionCase& c) const override {
    Judgement j;
    AttentionCapability* cap = backend.attention();
    if (!cap) return j.skip(missing_capability(backend, capability())), j;
    const Expected<AttentionInputs> inputs = attention_inputs(c);
    if (!inputs) return j.fail("the case has no inputs: " + describe(inputs.error())), j;
    const AttentionProblem& p = c.problem;
    if (const auto valid = validate_attention(p, &inputs.value()); !valid) {
      if (auto reason = domain_declines(backend, p)) return j.skip(declined_by(backend, *reason)), j;
      judge_errors(cap->attention(p, inputs.value()), Expected<AttentionResult>(valid.error()), j);
      return j;
    }
    if (auto reason = attention_declines(backend, p)) return j.skip(declined_by(backend, *reason)), j;
    if (p.shape.backward && !backend.outputs().gradients) return j.skip(declined_by(backend, "it produces no gradients")), j;
    if (!cap->token_level_mask())
      if (const auto r = ref::representability(p.batch); !r.representable)
        return j.skip("not representable (docs/semantics.md#the-kernels-index-rule-and-representability: this backend applies the index rule): " +
                      r.first_difference), j;
    const Expected<AttentionResult> got = cap->attention(p, inputs.value());
    const Expected<AttentionResult> want = ref::attention_dense_masked(p, inputs.value());
    if (judge_errors(got, want, j)) return j;
    judge_tolerance(check_attention_tolerance(p, inputs.value(), got.value(), want.value(), backend.outputs()), j);
    return j;
  }

  CoverageCell coverage_of(const AttentionCase& c) const override { return attention_coverage(c); }
  CaseSize size_of(const AttentionCase& c) const override { return batch_size(c.problem.batch); }
};

// ---------------------------------------------------------------------------
// small_seq
// ---------------------------------------------------------------------------

class SmallSeqOp final : public TypedCaseOp<SmallSeqCase> {
 public:
  std::string_view name() const override { return "small_seq"; }
  Capability capability() const override { return Capability::small_seq; }
  CasePayload read(const json& j) const override {
    case_json::reject_unknown_keys(j, case_json::attention_keys());
    return SmallSeqCase{case_json::parse_attention_case(j)};
  }
  double expected_tolerance() const override { return 1e-12; }

 protected:
  json write_fields(const SmallSeqCase& c) const override { return case_json::attention_case_to_json(c); }

  Evaluation evaluate_on(Backend& backend, const SmallSeqCase& c) const override {
    SmallSeqCapability* cap = backend.small_seq();
    if (!cap) return Evaluation::missing(backend, capability());
    const Expected<AttentionInputs> inputs = attention_inputs(c);
    if (!inputs) return Evaluation::of(inputs.error());
    const bool valid = small_seq_documents(c.problem, &inputs.value()).ok();
    if (auto reason = valid ? small_seq_declines(backend, c.problem) : domain_declines(backend, c.problem))
      return Evaluation::declined_because(declined_by(backend, *reason));
    const Expected<SmallSeqResult> r = cap->small_seq(c.problem, inputs.value());
    if (!r) return Evaluation::of(r.error());
    return Evaluation::of(small_seq_result_to_json(c.problem, r.value()));
  }

  Judgement judge_on(Backend& backend, const SmallSeqCase& c) const override {
    Judgement j;
    SmallSeqCapability* cap = backend.small_seq();
    if (!cap) return j.skip(missing_capability(backend, capability())), j;
    const Expected<AttentionInputs> inputs = attention_inputs(c);
    if (!inputs) return j.fail("the case has no inputs: " + describe(inputs.error())), j;
    const Expected<SmallSeqResult> want = ref::small_seq(c.problem, inputs.value());
    if (auto reason = want ? small_seq_declines(backend, c.problem) : domain_declines(backend, c.problem))
      return j.skip(declined_by(backend, *reason)), j;
    const Expected<SmallSeqResult> got = cap->small_seq(c.problem, inputs.value());
    if (judge_errors(got, want, j)) return j;
    judge_tolerance(check_small_seq_tolerance(c.problem, inputs.value(), got.value(), want.value(), backend.outputs()), j);
    return j;
  }

  CoverageCell coverage_of(const SmallSeqCase& c) const override { return attention_coverage(c); }
  CaseSize size_of(const SmallSeqCase& c) const override { return batch_size(c.problem.batch); }
};

}  // namespace

const CaseOp& attention_op() {
  static const AttentionOp op;
  return op;
}

const CaseOp& small_seq_op() {
  static const SmallSeqOp op;
  return op;
}

namespace case_json {

const std::set<std::string>& attention_keys() {
  static const std::set<std::string> keys = [] {
    std::set<std::string> k = batch_keys();
    k.insert(shape_keys().begin(), shape_keys().end());
    k.insert({"data", "tensors"});
    return k;
  }();
  return keys;
}

AttentionCase parse_attention_case(const json& j) {
  AttentionCase c;
  c.problem.batch = parse_batch(j);
  c.problem.shape = parse_shape(j);
  const bool has_data = j.contains("data"), has_tensors = j.contains("tensors");
  if (has_data == has_tensors) fail("data, tensors: exactly one of them is required");
  if (has_tensors) {
    c.tensors = parse_tensors(j["tensors"], c.problem);
    return c;
  }
  const json& data = j["data"];
  if (!data.is_object()) fail("data: expected {\"seed\": N}, found " + data.dump());
  reject_unknown_keys(data, {"seed"}, "data.");
  c.data_seed = seed_field(required(data, "seed", "data."), "data.seed");
  return c;
}

json attention_case_to_json(const AttentionCase& c) {
  json j = batch_to_json(c.problem.batch);
  j.update(shape_to_json(c.problem.shape));
  if (c.data_seed) j["data"] = {{"seed", *c.data_seed}};
  if (c.tensors) {
    const ResultShapes s = result_shapes(c.problem);
    json t = {{"q", nest(s.q, c.tensors->q)}, {"k", nest(s.kv, c.tensors->k)}, {"v", nest(s.kv, c.tensors->v)}};
    if (c.problem.shape.backward) t["do"] = nest(s.q, c.tensors->d_o);
    j["tensors"] = std::move(t);
  }
  return j;
}

}  // namespace case_json

Expected<AttentionInputs> attention_inputs(const AttentionCase& c) {
  if (c.data_seed) return generate_inputs(c.problem, *c.data_seed);
  if (!c.tensors) return Error{ErrorCode::bad_case, "data, tensors: the case has neither"};
  // The values as written first: a value that rounding makes infinite is
  // named as the file has it (70000 in fp16), not as inf.
  auto length = [](const IntArray& ids) { return ids.shape.empty() ? int64_t{1} : ids.shape.back(); };
  if (auto e = check_attention_values(c.problem.shape, *c.tensors, length(c.problem.batch.q.segment_ids),
                                      length(c.problem.batch.kv.segment_ids)))
    return *e;
  AttentionInputs in = *c.tensors;
  for (auto* t : {&in.q, &in.k, &in.v, &in.d_o})
    for (double& x : *t) x = round_to_dtype(x, c.problem.shape.dtype);
  return in;
}

json attention_result_to_json(const AttentionProblem& problem, const AttentionResult& r) {
  const ResultShapes s = result_shapes(problem);
  json j = {{"o", case_json::nest(s.q, r.o)}, {"lse", case_json::nest(s.lse, r.lse)}};
  add_gradients(j, s, r.grads);
  return j;
}

// P is [docs][Hq][16]; docs is read off its size.
json small_seq_result_to_json(const AttentionProblem& problem, const SmallSeqResult& r) {
  const ResultShapes s = result_shapes(problem);
  const int64_t row = std::max<int64_t>(1, problem.shape.heads_q) * kSmallSeqMaxKeys;
  const Shape p = r.p.size() % row == 0
                      ? Shape{static_cast<int64_t>(r.p.size()) / row, problem.shape.heads_q, kSmallSeqMaxKeys}
                      : Shape{-1};
  json j = {{"o", case_json::nest(s.q, r.o)}, {"p", case_json::nest(p, r.p)}};
  add_gradients(j, s, r.grads);
  return j;
}

}  // namespace attn_oracle::cases
