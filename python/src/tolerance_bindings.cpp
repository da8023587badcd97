// tolerance_bindings.cpp: the tolerance rule of reference/tolerance.hpp
// (docs/semantics.md#6-tolerance) on a backend's NumPy outputs, for
// attn_oracle/tolerance.py. The oracle computes the float64 reference and the
// same-precision naive run of the case itself, so only the backend's outputs
// cross: o, lse (attention) or o, p (small_seq), and dq, dk, dv with backward.
// Each check comes back as a dict: the C++ verdict and worst element, plus the
// first element (row-major) that breaks the rule, which the C++ rule does not
// report. Tested by python/tests/test_tolerance.py.
#include <cmath>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/cases/small_seq_checks.hpp"

namespace attn_oracle::python {
namespace {

using nlohmann::json;

struct Output {
  const FloatIn* tensor;  // null when the backend gave none
  Shape expected;
};

// The first flat index that breaks the rule: a NaN, an infinity the reference
// does not have, or an error over the budget; -1 when none does.
int64_t first_failure(const std::vector<double>& backend, const std::vector<double>& ref64, double budget) {
  if (backend.size() != ref64.size()) return -1;
  for (size_t i = 0; i < ref64.size(); ++i) {
    const double b = backend[i], r = ref64[i];
    if (std::isnan(b) || std::isnan(r)) return static_cast<int64_t>(i);
    if (std::isinf(b) || std::isinf(r)) {
      if (b != r) return static_cast<int64_t>(i);
      continue;
    }
    if (std::fabs(b - r) > budget) return static_cast<int64_t>(i);
  }
  return -1;
}

nb::dict check_dict(const ToleranceCheck& c, const std::vector<double>& backend, const std::vector<double>& ref64) {
  nb::dict d;
  d["tensor"] = c.tensor;
  d["passed"] = c.pass;
  d["worst_index"] = c.worst_index;
  d["backend_value"] = c.backend_value;
  d["reference_value"] = c.reference_value;
  d["error"] = c.error;
  d["budget"] = c.budget;
  d["ratio"] = c.ratio;
  d["naive_error"] = c.naive_error;
  d["k"] = c.k;
  d["eps"] = c.eps;
  d["detail"] = c.detail;
  d["description"] = c.describe();
  const int64_t first = c.pass ? -1 : first_failure(backend, ref64, c.budget);
  d["first_failure_index"] = first;
  d["first_failure_backend"] = first >= 0 ? backend[first] : 0.0;
  d["first_failure_reference"] = first >= 0 ? ref64[first] : 0.0;
  return d;
}

// A check that failed before any value was compared (a missing tensor, a shape).
ToleranceCheck shape_failure(const std::string& tensor, const std::string& detail) {
  ToleranceCheck c;
  c.tensor = tensor;
  c.error = c.ratio = std::numeric_limits<double>::infinity();
  c.detail = detail;
  return c;
}

std::vector<double> values(const Output& out) { return out.tensor ? float_vector(*out.tensor) : std::vector<double>{}; }

std::optional<std::string> shape_problem(const std::string& name, const Output& out) {
  if (!out.tensor) return name + ": missing from the backend's output";
  if (shape_of(*out.tensor) != out.expected)
    return name + ": shape " + shape_to_string(shape_of(*out.tensor)) + ", expected " + shape_to_string(out.expected);
  return std::nullopt;
}

struct Judged {
  AttentionCase fields;
  AttentionInputs inputs;
  Shape q_shape, kv_shape, lse_shape;
};

Judged judged_case(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    raise(ErrorCode::bad_case, std::string("not valid JSON: ") + e.what());
  }
  const Case c = value_or_raise(case_from_json(j));
  const AttentionCase* a = c.as<AttentionCase>();
  if (!a) a = c.as<SmallSeqCase>();
  if (!a) raise(ErrorCode::bad_case, "op: the tolerance rule judges attention and small_seq cases; compare the other ops' integers exactly");
  Judged out{*a, value_or_raise(attention_inputs(*a)), {}, {}, {}};
  const AttentionProblem& p = a->problem;
  value_or_raise(validate_attention(p, &out.inputs));
  const BatchLayout l = value_or_raise(validate_shapes(p.batch));
  out.q_shape = concat(l.extra, {l.batch, l.q_len, p.shape.heads_q, p.shape.head_dim});
  out.kv_shape = concat(l.extra, {l.batch, l.kv_len, p.shape.heads_kv, p.shape.head_dim});
  out.lse_shape = concat(l.extra, {l.batch, p.shape.heads_q, l.q_len});
  return out;
}

// The rule for every tensor of a case's result; `second` is lse or p.
nb::list judge(const std::string& text, const std::optional<FloatIn>& o, const std::optional<FloatIn>& second,
               const std::optional<FloatIn>& dq, const std::optional<FloatIn>& dk, const std::optional<FloatIn>& dv) {
  const Judged c = judged_case(text);
  const AttentionProblem& p = c.fields.problem;
  const bool small = json::parse(text).value("op", "") == "small_seq";
  const auto given = [](const std::optional<FloatIn>& t) { return t ? &*t : nullptr; };
  std::vector<std::pair<std::string, Output>> outputs = {{"o", {given(o), c.q_shape}},
                                                         {small ? "p" : "lse", {given(second), {}}}};
  if (p.shape.backward)
    for (auto [name, tensor, shape] : {std::tuple{"dq", &dq, c.q_shape}, {"dk", &dk, c.kv_shape}, {"dv", &dv, c.kv_shape}})
      outputs.push_back({name, {given(*tensor), shape}});

  std::vector<ToleranceCheck> checks;
  std::vector<std::vector<double>> refs;
  if (small) {
    const SmallSeqResult want = value_or_raise(ref::small_seq(p, c.inputs));
    outputs[1].second.expected = {static_cast<int64_t>(want.p.size()) / (p.shape.heads_q * kSmallSeqMaxKeys),
                                  p.shape.heads_q, kSmallSeqMaxKeys};
    SmallSeqResult got{values(outputs[0].second), values(outputs[1].second), std::nullopt};
    if (p.shape.backward) got.grads = AttentionGradients{values(outputs[2].second), values(outputs[3].second), values(outputs[4].second)};
    checks = check_small_seq_tolerance(p, c.inputs, got, want);
    refs = {want.o, want.p};
    if (want.grads) refs.insert(refs.end(), {want.grads->dq, want.grads->dk, want.grads->dv});
  } else {
    const AttentionResult want = value_or_raise(ref::attention_dense_masked(p, c.inputs));
    outputs[1].second.expected = c.lse_shape;
    AttentionResult got{values(outputs[0].second), values(outputs[1].second), std::nullopt};
    if (p.shape.backward) got.grads = AttentionGradients{values(outputs[2].second), values(outputs[3].second), values(outputs[4].second)};
    checks = check_attention_tolerance(p, c.inputs, got, want);
    refs = {want.o, want.lse};
    if (want.grads) refs.insert(refs.end(), {want.grads->dq, want.grads->dk, want.grads->dv});
  }
  nb::list result;
  for (size_t i = 0; i < checks.size() && i < outputs.size(); ++i) {
    const auto& [name, out] = outputs[i];
    if (auto problem = shape_problem(name, out)) {
      result.append(check_dict(shape_failure(name, *problem), {}, {}));
      continue;
    }
    result.append(check_dict(checks[i], values(out), refs[i]));
  }
  return result;
}

}  // namespace

void bind_tolerance(nb::module_& m) {
  m.def("judge", &judge);
  m.def("tolerance_floor", [](const std::string& dtype) {
    const auto parsed = dtype_from_string(dtype);
    if (!parsed) raise(ErrorCode::bad_case, "dtype: expected \"fp32\", \"fp16\" or \"bf16\", found \"" + dtype + "\"");
    return tolerance_floor(*parsed);
  });
  m.attr("OUTPUT_TOLERANCE_FACTOR") = kOutputToleranceFactor;
  m.attr("GRADIENT_TOLERANCE_FACTOR") = kGradientToleranceFactor;
}

}  // namespace attn_oracle::python
