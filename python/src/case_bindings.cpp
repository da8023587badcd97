// case_bindings.cpp: case files (cases/include/attn_oracle/cases/case_file.hpp,
// docs/case-files.md) for attn_oracle/cases.py. The C++ reader and writer do
// all the work, so Python reads exactly what `attn-oracle` reads: a case
// crosses as its canonical JSON text (case_to_json), which cases.py turns into
// NumPy arrays, and comes back as JSON text that case_from_json validates
// before anything is written or evaluated. Tested by python/tests/test_cases.py.
#include <string>

#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::python {
namespace {

using nlohmann::json;

Case case_of(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    raise(ErrorCode::bad_case, std::string("not valid JSON: ") + e.what());
  }
  return value_or_raise(case_from_json(j));
}

std::string read_case(const std::string& path) { return case_to_json(value_or_raise(read_case_file(path))).dump(); }

std::string normalize_case(const std::string& text) { return case_to_json(case_of(text)).dump(); }

void write_case(const std::string& path, const std::string& text) {
  if (!write_case_file(path, case_of(text))) raise(ErrorCode::bad_case, path + ": cannot write the file");
}

// What `attn-oracle eval` prints on the reference, as JSON text; a rejected input raises.
std::string eval_case(const std::string& text) {
  const std::unique_ptr<Backend> reference = make_reference_backend();
  const Case c = case_of(text);
  const Evaluation e = op_of(c).evaluate(*reference, c.payload);  // not replay.hpp: it pulls in the property runner
  if (e.kind == Evaluation::Kind::result) return e.output.dump();
  const json& error = e.output.contains("error") ? e.output["error"] : json::object();
  const std::string code = error.value("code", "unsupported");
  const auto parsed = error_code_from_string(code);
  raise(parsed ? *parsed : ErrorCode::unsupported, error.value("message", e.reason));
}

// The tensors an attention or small_seq case is evaluated on (generated from
// its seed, or its own rounded to the dtype), in its nested layouts.
nb::dict case_inputs(const std::string& text) {
  const Case c = case_of(text);
  const AttentionCase* a = c.as<AttentionCase>();
  if (!a) a = c.as<SmallSeqCase>();
  if (!a) raise(ErrorCode::bad_case, "op: only attention and small_seq cases have tensors");
  const AttentionInputs in = value_or_raise(attention_inputs(*a));
  value_or_raise(validate_attention(a->problem, &in));
  const BatchLayout l = value_or_raise(validate_shapes(a->problem.batch));
  const AttentionShape& s = a->problem.shape;
  const Shape q_shape = concat(l.extra, {l.batch, l.q_len, s.heads_q, s.head_dim});
  const Shape kv_shape = concat(l.extra, {l.batch, l.kv_len, s.heads_kv, s.head_dim});
  nb::dict d;
  d["q"] = numpy_array(in.q, q_shape);
  d["k"] = numpy_array(in.k, kv_shape);
  d["v"] = numpy_array(in.v, kv_shape);
  if (s.backward) d["do"] = numpy_array(in.d_o, q_shape);
  return d;
}

}  // namespace

void bind_cases(nb::module_& m) {
  m.def("read_case", &read_case);
  m.def("normalize_case", &normalize_case);
  m.def("write_case", &write_case);
  m.def("eval_case", &eval_case);
  m.def("case_inputs", &case_inputs);
  m.attr("CASE_SCHEMA") = kCaseSchema;
}

}  // namespace attn_oracle::python
