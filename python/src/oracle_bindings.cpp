// oracle_bindings.cpp: the float64 oracle of reference/ on NumPy arrays:
// metadata, the explicit masks, representability, attention forward and
// backward (dense against the explicit mask, or per document), and the
// small-sequence reference. The Python layer (attn_oracle/oracle.py) makes the
// arrays int64 / float64 and C-contiguous and documents the functions; here
// they are checked in the order a case file is (validation codes first, then
// tensor shapes, then values) and every Error is raised with its code.
// Tested by python/tests/test_oracle.py against `attn-oracle eval`.
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::python {
namespace {

using Window2 = std::pair<int64_t, int64_t>;

nb::dict metadata_dict(const Metadata& md) {
  const int64_t B = md.batch, M = md.max_segments, S = md.documents();
  nb::dict d;
  d["q_seqlens"] = numpy_array(md.q_seqlens, concat(md.extra, {B, M}));
  d["kv_seqlens"] = numpy_array(md.kv_seqlens, concat(md.extra, {B, M}));
  d["q_offsets"] = numpy_array(md.q_offsets, concat(md.extra, {B, M + 1}));
  d["kv_offsets"] = numpy_array(md.kv_offsets, concat(md.extra, {B, M + 1}));
  d["cu_seqlens_q"] = numpy_array(md.cu_seqlens_q, {S + 1});
  d["cu_seqlens_kv"] = numpy_array(md.cu_seqlens_kv, {S + 1});
  d["ragged_offsets_q"] = numpy_array(md.ragged_offsets_q, {S + 1});
  d["ragged_offsets_kv"] = numpy_array(md.ragged_offsets_kv, {S + 1});
  return d;
}

nb::dict metadata(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                  const std::string& mask, Window2 window, int64_t max_segments) {
  const PackedBatch batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  return metadata_dict(value_or_raise(ref::metadata(batch)));
}

// [..., B, Tq, Tkv]: every broadcast row's mask of docs/semantics.md#2-the-attention-mask.
nb::object explicit_mask(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                         const std::string& mask, Window2 window, int64_t max_segments, bool with_window) {
  const PackedBatch batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  const BatchLayout layout = value_or_raise(validate(batch));
  MemoryNeed need;
  need.add("the explicit masks of every row", {layout.rows(), layout.q_len, layout.kv_len});
  if (auto e = need.check("the explicit mask")) raise(*e);
  const int64_t per_row = layout.q_len * layout.kv_len;
  std::vector<char> out(static_cast<size_t>(layout.rows() * per_row));
  for (int64_t r = 0; r < layout.rows(); ++r) {
    const std::vector<char> m = ref::explicit_mask(batch, layout, r, with_window).dense();
    std::copy(m.begin(), m.end(), out.begin() + r * per_row);
  }
  return numpy_bool_array(std::move(out), concat(layout.extra, {layout.batch, layout.q_len, layout.kv_len}));
}

std::pair<bool, std::string> representability(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids,
                                               const IntIn& kv_pos, const std::string& mask, Window2 window,
                                               int64_t max_segments) {
  const PackedBatch batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  value_or_raise(ref::metadata(batch));  // validation and the memory budget of the masks
  const ref::Representability r = ref::representability(batch);
  return {r.representable, r.first_difference};
}

// The problem and its dtype-rounded inputs, checked as a case file's are:
// the batch and heads first, then each tensor's shape, then the values.
struct Attention {
  AttentionProblem problem;
  AttentionInputs inputs;
  BatchLayout layout;
};

void check_tensor_shape(const char* name, const Shape& got, const Shape& expected) {
  if (got != expected)
    raise(ErrorCode::bad_tensor_shape,
          std::string(name) + ": shape " + shape_to_string(got) + ", expected " + shape_to_string(expected));
}

Attention attention_problem(const FloatIn& q, const FloatIn& k, const FloatIn& v, const std::optional<FloatIn>& d_o,
                            const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                            const std::string& mask, Window2 window, int64_t max_segments, const std::string& dtype,
                            std::optional<double> scale) {
  Attention a;
  a.problem.batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  const auto parsed = dtype_from_string(dtype);
  if (!parsed) raise(ErrorCode::bad_case, "dtype: expected \"fp32\", \"fp16\" or \"bf16\", found \"" + dtype + "\"");
  if (q.ndim() < 2 || k.ndim() < 2)
    raise(ErrorCode::bad_tensor_shape, "q, k: expected [..., B, T, heads, head_dim], found " +
                                           shape_to_string(shape_of(q)) + " and " + shape_to_string(shape_of(k)));
  AttentionShape& s = a.problem.shape;
  s.heads_q = static_cast<int64_t>(q.shape(q.ndim() - 2));
  s.head_dim = static_cast<int64_t>(q.shape(q.ndim() - 1));
  s.heads_kv = static_cast<int64_t>(k.shape(k.ndim() - 2));
  s.dtype = *parsed;
  s.scale = scale;
  s.backward = d_o.has_value();
  value_or_raise(validate_attention(a.problem));
  a.layout = value_or_raise(validate_shapes(a.problem.batch));
  const Shape q_shape = concat(a.layout.extra, {a.layout.batch, a.layout.q_len, s.heads_q, s.head_dim});
  const Shape kv_shape = concat(a.layout.extra, {a.layout.batch, a.layout.kv_len, s.heads_kv, s.head_dim});
  check_tensor_shape("q", shape_of(q), q_shape);
  check_tensor_shape("k", shape_of(k), kv_shape);
  check_tensor_shape("v", shape_of(v), kv_shape);
  if (d_o) check_tensor_shape("do", shape_of(*d_o), q_shape);
  AttentionCase c{a.problem, std::nullopt,
                  AttentionInputs{float_vector(q), float_vector(k), float_vector(v),
                                  d_o ? float_vector(*d_o) : std::vector<double>{}}};
  a.inputs = value_or_raise(attention_inputs(c));  // values checked, then rounded to the dtype
  value_or_raise(validate_attention(a.problem, &a.inputs));
  return a;
}

void add_gradients(nb::dict& d, const std::optional<AttentionGradients>& g, const Shape& q_shape,
                   const Shape& kv_shape) {
  if (!g) return;
  d["dq"] = numpy_array(g->dq, q_shape);
  d["dk"] = numpy_array(g->dk, kv_shape);
  d["dv"] = numpy_array(g->dv, kv_shape);
}

nb::dict attention(const FloatIn& q, const FloatIn& k, const FloatIn& v, const std::optional<FloatIn>& d_o,
                   const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                   const std::string& mask, Window2 window, int64_t max_segments, const std::string& dtype,
                   std::optional<double> scale, const std::string& method) {
  if (method != "dense" && method != "per_document")
    throw nb::value_error(("method: expected \"dense\" or \"per_document\", found \"" + method + "\"").c_str());
  const Attention a =
      attention_problem(q, k, v, d_o, q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments, dtype, scale);
  const AttentionResult r = value_or_raise(method == "dense" ? ref::attention_dense_masked(a.problem, a.inputs)
                                                             : ref::attention_per_document(a.problem, a.inputs));
  const BatchLayout& l = a.layout;
  const AttentionShape& s = a.problem.shape;
  nb::dict d;
  d["o"] = numpy_array(r.o, shape_of(q));
  d["lse"] = numpy_array(r.lse, concat(l.extra, {l.batch, s.heads_q, l.q_len}));
  add_gradients(d, r.grads, shape_of(q), shape_of(k));
  return d;
}

nb::dict small_seq(const FloatIn& q, const FloatIn& k, const FloatIn& v, const std::optional<FloatIn>& d_o,
                   const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                   const std::string& mask, Window2 window, int64_t max_segments, const std::string& dtype,
                   std::optional<double> scale) {
  const Attention a =
      attention_problem(q, k, v, d_o, q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments, dtype, scale);
  const SmallSeqResult r = value_or_raise(ref::small_seq(a.problem, a.inputs));
  const int64_t per_document = a.problem.shape.heads_q * kSmallSeqMaxKeys;
  nb::dict d;
  d["o"] = numpy_array(r.o, shape_of(q));
  d["p"] = numpy_array(r.p, {static_cast<int64_t>(r.p.size()) / per_document, a.problem.shape.heads_q,
                             kSmallSeqMaxKeys});
  add_gradients(d, r.grads, shape_of(q), shape_of(k));
  return d;
}

}  // namespace

// Positional arguments only: attn_oracle/oracle.py is the documented surface.
void bind_oracle(nb::module_& m) {
  m.def("metadata", &metadata);
  m.def("explicit_mask", &explicit_mask);
  m.def("representability", &representability);
  m.def("attention", &attention);
  m.def("small_seq", &small_seq);
}

}  // namespace attn_oracle::python
