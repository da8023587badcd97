// kv_buffer_stream.cpp: the shared K/V buffer driver (docs/semantics.md#3-metadata), one for
// the CPU twin and the CUDA kernels: checks, the micro-sequence's plan, the fused
// varlen attention on the narrowed view, and the gradient accumulation. See
// gpu/kv_buffer.hpp for the steps.
//
// The fused attention sees micro-sequence i as one packed row per side whose
// documents are exactly the cu_seqlens runs (q: [begin, end), kv: [fdb, end)),
// with run-local positions and causal_bottom_right: a document that began in an
// earlier micro-sequence has more keys than queries, and bottom-right alignment
// lets its queries see all of its earlier keys. Taking the runs from cu_seqlens
// (not from the token ids) is what the kernels do, so a non-canonical plan
// (cu_seqlens_k[0] != 0) cannot go unnoticed: the runs no longer tile the view.
//
// Tested by tests/kv_buffer_test.cpp and the kv_buffer properties.
#include <string>

#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/gpu/kv_buffer.hpp"
#include "attn_oracle/gpu/kv_buffer/kv_buffer_rows.hpp"

namespace attn_oracle::gpu {
namespace {

// The fused attention's problem for one micro-sequence (see the file comment).
AttentionProblem attention_view(const KvBufferProblem& problem, const MicroSequenceMetadata& plan) {
  auto side = [](const std::vector<int64_t>& cu) {
    std::vector<int64_t> ids, pos;
    for (size_t s = 0; s + 1 < cu.size(); ++s)
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t) ids.push_back(static_cast<int64_t>(s) + 1), pos.push_back(t - cu[s]);
    const int64_t n = static_cast<int64_t>(ids.size());
    return PackedSide{IntArray({1, n}, std::move(ids)), IntArray({1, n}, std::move(pos))};
  };
  AttentionProblem view;
  view.batch.mask = MaskKind::causal_bottom_right;
  view.batch.max_segments = std::max<int64_t>(1, plan.documents());
  view.batch.q = side(plan.cu_seqlens_q);
  view.batch.kv = side(plan.cu_seqlens_k);
  view.shape = problem.shape;
  return view;
}

// Problem, index and buffer checks shared by the steps.
Expected<KvBufferSizes> check_step(const KvBufferProblem& problem, int64_t i, const std::vector<double>& buffer,
                                   KvDevice device) {
  auto z = validate_kv_buffer(problem);
  if (!z) return z.error();
  if (auto e = check_micro_sequence_index(z.value(), i)) return *e;
  if (auto e = check_tensor_size("buffer", buffer, z->buffer_elems())) return *e;
  if (device == KvDevice::cuda)
    if (auto reason = kv_buffer_cuda_unsupported(problem)) return Error{ErrorCode::unsupported, *reason};
  return z;
}

}  // namespace

Expected<MicroSequenceMetadata> kv_buffer_plan(const KvBufferProblem& problem, int64_t i, KvDevice device) {
  auto z = validate_kv_buffer(problem);
  if (!z) return z.error();
  if (auto e = check_micro_sequence_index(z.value(), i)) return *e;
  if (device == KvDevice::twin) return plan_micro_sequence_twin(problem, i);
  return plan_micro_sequence_cuda(problem, i);
}

std::optional<Error> kv_buffer_write_slice(const KvBufferProblem& problem, int64_t i, const std::vector<double>& slice,
                                           std::vector<double>& buffer, KvDevice device) {
  auto z = check_step(problem, i, buffer, device);
  if (!z) return z.error();
  const int64_t row = 2 * z->heads_kv * z->head_dim, begin = i * problem.micro_seq_tokens;
  const TokenRange r = micro_sequence_range(problem, i);
  const int64_t len = static_cast<int64_t>(slice.size()) / row;
  if (static_cast<int64_t>(slice.size()) % row != 0)
    return Error{ErrorCode::bad_tensor_shape, "slice has " + std::to_string(slice.size()) +
                                                  " elements, not a whole number of [2, Hkv, D] rows of " +
                                                  std::to_string(row)};
  if (!slice_in_bounds(begin, len, z->tokens))
    return Error{ErrorCode::kv_buffer_slice_out_of_bounds, "slice of " + std::to_string(len) + " tokens at " +
                                                               std::to_string(begin) + " overruns the buffer of " +
                                                               std::to_string(z->tokens) + " tokens"};
  if (len != r.end - r.begin)
    return Error{ErrorCode::bad_tensor_shape, "slice of micro-sequence " + std::to_string(i) + " has " +
                                                  std::to_string(len) + " tokens, expected " +
                                                  std::to_string(r.end - r.begin)};
  if (device == KvDevice::twin) {
    write_slice_twin(begin, slice, buffer, row);
    return std::nullopt;
  }
  return write_slice_cuda(begin, slice, buffer, row);
}

Expected<AttentionResult> kv_buffer_attend(const KvBufferProblem& problem, int64_t i, const AttentionInputs& micro,
                                           const std::vector<double>& buffer, std::vector<double>* grad_buffer,
                                           KvDevice device) {
  auto z = check_step(problem, i, buffer, device);
  if (!z) return z.error();
  const bool backward = problem.shape.backward;
  const TokenRange r = micro_sequence_range(problem, i);
  const int64_t q_elems = (r.end - r.begin) * z->heads_q * z->head_dim;
  if (auto e = check_tensor_size("q", micro.q, q_elems)) return *e;
  if (auto e = check_tensor_size("do", micro.d_o, backward ? q_elems : 0)) return *e;
  if (backward) {
    if (grad_buffer == nullptr) return Error{ErrorCode::bad_tensor_shape, "backward needs a gradient buffer"};
    if (auto e = check_tensor_size("grad_buffer", *grad_buffer, z->buffer_elems())) return *e;
  }
  auto plan = kv_buffer_plan(problem, i, device);
  if (!plan) return plan.error();
  const int64_t fdb = plan->first_document_begin;
  const AttentionProblem view = attention_view(problem, plan.value());
  const AttentionInputs in{micro.q, buffer_part(buffer, 0, fdb, r.end, z->heads_kv, z->head_dim),
                           buffer_part(buffer, 1, fdb, r.end, z->heads_kv, z->head_dim), micro.d_o};
  auto out = device == KvDevice::twin ? attention_twin(view, in) : attention_cuda(view, in);
  if (!out || !backward) return out;
  const int64_t row_kv = z->heads_kv * z->head_dim;
  if (device == KvDevice::twin) {
    accumulate_grads_twin(fdb, out->grads->dk, out->grads->dv, *grad_buffer, row_kv);
  } else if (auto e = accumulate_grads_cuda(fdb, out->grads->dk, out->grads->dv, *grad_buffer, row_kv)) {
    return *e;
  }
  return out;
}

Expected<AttentionResult> kv_buffer_stream(const KvBufferProblem& problem, const AttentionInputs& inputs,
                                           KvDevice device) {
  auto sizes = validate_kv_buffer(problem, &inputs);
  if (!sizes) return sizes.error();
  const KvBufferSizes& z = sizes.value();
  const int64_t hq = z.heads_q, d = z.head_dim, n = z.tokens;
  AttentionResult out;
  out.o.assign(n * hq * d, 0.0);
  out.lse.assign(hq * n, 0.0);
  std::vector<double> buffer(z.buffer_elems(), 0.0), grad(z.buffer_elems(), 0.0);
  KvBufferProblem forward = problem;
  forward.shape.backward = false;
  for (int64_t i = 0; i < z.micro_sequences; ++i) {
    const TokenRange r = micro_sequence_range(problem, i);
    if (auto e = kv_buffer_write_slice(forward, i, kv_slice_of(problem, i, inputs), buffer, device)) return *e;
    const AttentionInputs micro{token_rows(inputs.q, r.begin, r.end, hq, d), {}, {}, {}};
    auto step = kv_buffer_attend(forward, i, micro, buffer, nullptr, device);
    if (!step) return step.error();
    std::copy(step->o.begin(), step->o.end(), out.o.begin() + r.begin * hq * d);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t t = r.begin; t < r.end; ++t) out.lse[h * n + t] = step->lse[h * (r.end - r.begin) + t - r.begin];
  }
  if (!problem.shape.backward) return out;
  AttentionGradients g{std::vector<double>(n * hq * d, 0.0), {}, {}};
  for (int64_t i = z.micro_sequences - 1; i >= 0; --i) {
    const TokenRange r = micro_sequence_range(problem, i);
    const AttentionInputs micro{token_rows(inputs.q, r.begin, r.end, hq, d), {}, {},
                                token_rows(inputs.d_o, r.begin, r.end, hq, d)};
    auto step = kv_buffer_attend(problem, i, micro, buffer, &grad, device);
    if (!step) return step.error();
    std::copy(step->grads->dq.begin(), step->grads->dq.end(), g.dq.begin() + r.begin * hq * d);
  }
  // The fp32 gradient buffer leaves the device in the dtype, as every gradient does.
  for (double& x : grad) x = round_to_dtype(x, problem.shape.dtype);
  g.dk = buffer_part(grad, 0, 0, n, z.heads_kv, d);
  g.dv = buffer_part(grad, 1, 0, n, z.heads_kv, d);
  out.grads = std::move(g);
  return out;
}

}  // namespace attn_oracle::gpu
