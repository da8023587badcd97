// kv_buffer_bindings.cpp: the float64 oracle of the shared K/V buffer
// (docs/semantics.md#3-metadata, reference/kv_buffer.hpp) on NumPy arrays: each micro-sequence's
// canonical metadata, and the streamed outputs and gradients (which equal
// whole-sequence per-document causal attention). The documented surface is
// attn_oracle/oracle.py; tested by python/tests/test_kv_buffer_oracle.py.
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/kv_buffer.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"

namespace attn_oracle::python {
namespace {

KvBufferProblem kv_problem(const IntIn& doc_lengths, int64_t micro_seq_tokens) {
  if (doc_lengths.ndim() != 1)
    raise(ErrorCode::bad_case, "doc_lengths: expected one list of lengths, found shape " + shape_to_string(shape_of(doc_lengths)));
  KvBufferProblem p;
  p.doc_lengths = int_array(doc_lengths).data;
  p.micro_seq_tokens = micro_seq_tokens;
  return p;
}

nb::dict micro_sequence_dict(const MicroSequenceMetadata& md) {
  auto ints = [](const std::vector<int64_t>& v) { return numpy_array(v, {static_cast<int64_t>(v.size())}); };
  nb::dict d;
  d["index"] = md.index, d["begin"] = md.begin, d["end"] = md.end, d["first_document_begin"] = md.first_document_begin;
  d["cu_seqlens_q"] = ints(md.cu_seqlens_q), d["cu_seqlens_k"] = ints(md.cu_seqlens_k);
  d["q_document"] = ints(md.q_document), d["q_position"] = ints(md.q_position);
  d["kv_document"] = ints(md.kv_document), d["kv_position"] = ints(md.kv_position);
  return d;
}

// Every micro-sequence's metadata, in order; the problem's codes for an invalid one.
nb::list kv_buffer_metadata(const IntIn& doc_lengths, int64_t micro_seq_tokens) {
  KvBufferProblem p = kv_problem(doc_lengths, micro_seq_tokens);
  p.shape.heads_q = p.shape.heads_kv = p.shape.head_dim = 1;  // the metadata does not depend on them
  const KvBufferSizes z = value_or_raise(validate_kv_buffer(p));
  nb::list out;
  for (int64_t i = 0; i < z.micro_sequences; ++i) out.append(micro_sequence_dict(value_or_raise(ref::micro_sequence_metadata(p, i))));
  return out;
}

std::vector<double> rounded(const FloatIn& a, Dtype dtype) {
  std::vector<double> v = float_vector(a);
  for (double& x : v) x = round_to_dtype(x, dtype);
  return v;
}

// q [N, Hq, D], k and v [N, Hkv, D], do like q: o, lse [Hq, N] and, with do, dq, dk, dv.
nb::dict kv_buffer_stream(const FloatIn& q, const FloatIn& k, const FloatIn& v, const std::optional<FloatIn>& d_o,
                          const IntIn& doc_lengths, int64_t micro_seq_tokens, const std::string& dtype,
                          std::optional<double> scale) {
  KvBufferProblem p = kv_problem(doc_lengths, micro_seq_tokens);
  const auto parsed = dtype_from_string(dtype);
  if (!parsed) raise(ErrorCode::bad_case, "dtype: expected \"fp32\", \"fp16\" or \"bf16\", found \"" + dtype + "\"");
  if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || (d_o && d_o->ndim() != 3))
    raise(ErrorCode::bad_tensor_shape, "q, k, v, do: expected [N, heads, head_dim] each, found q " +
                                           shape_to_string(shape_of(q)) + ", k " + shape_to_string(shape_of(k)));
  AttentionShape& s = p.shape;
  s.heads_q = static_cast<int64_t>(q.shape(1)), s.head_dim = static_cast<int64_t>(q.shape(2));
  s.heads_kv = static_cast<int64_t>(k.shape(1));
  s.dtype = *parsed, s.scale = scale, s.backward = d_o.has_value();
  const AttentionInputs in{rounded(q, s.dtype), rounded(k, s.dtype), rounded(v, s.dtype),
                           d_o ? rounded(*d_o, s.dtype) : std::vector<double>{}};
  const KvBufferSizes z = value_or_raise(validate_kv_buffer(p, &in));  // the tensors' sizes, with their codes
  const AttentionResult r = value_or_raise(ref::kv_buffer_streaming(p, in));
  nb::dict d;
  d["o"] = numpy_array(r.o, shape_of(q));
  d["lse"] = numpy_array(r.lse, {z.heads_q, z.tokens});
  if (r.grads) {
    d["dq"] = numpy_array(r.grads->dq, shape_of(q));
    d["dk"] = numpy_array(r.grads->dk, shape_of(k));
    d["dv"] = numpy_array(r.grads->dv, shape_of(k));
  }
  return d;
}

}  // namespace

void bind_kv_buffer(nb::module_& m) {
  m.def("kv_buffer_metadata", &kv_buffer_metadata);
  m.def("kv_buffer_stream", &kv_buffer_stream);
}

}  // namespace attn_oracle::python
