// small_seq_cuda.cpp: the `cuda` backend's small-seq entry points
// (docs/semantics.md#8-small-sequence-problems): validation and the document list through
// plan_small_seq (the twin's, so error codes and order are the same by construction), then
// `unsupported` for what the kernels lack (fp32, head dims other than 64..512 in
// steps of 64, more than kSmallSeqMaxGroup query heads per kv head), the seam's
// double tensors converted to fp16 / bf16 bit patterns, the kernels of
// small_seq_kernels.cu, and the results widened back (P is fp32 on the device).
// Checked by the small-seq properties on the `cuda` backend when a device is present.
#include <string>

#include "attn_oracle/gpu/attention_device.hpp"  // to_storage_bits, from_storage_bits
#include "attn_oracle/gpu/metadata.hpp"          // cuda_available
#include "attn_oracle/gpu/small_seq.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_plan.hpp"
#include "attn_oracle/gpu/small_seq_device.hpp"

namespace attn_oracle::gpu {
namespace {

std::vector<uint16_t> to_storage(const std::vector<double>& x, int dtype) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = to_storage_bits(static_cast<float>(x[i]), dtype);
  return bits;
}

std::vector<double> widen(const std::vector<uint16_t>& bits, int dtype) {
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_storage_bits(bits[i], dtype);
  return out;
}

}  // namespace

std::optional<std::string> small_seq_cuda_unsupported(const AttentionProblem& problem) {
  if (!cuda_available()) return "no CUDA device on this machine";
  const AttentionShape& s = problem.shape;
  if (s.dtype == Dtype::fp32) return "the small-seq CUDA kernels store fp16 or bf16, not fp32";
  if (s.head_dim < 64 || s.head_dim > 512 || s.head_dim % 64 != 0)
    return "head_dim " + std::to_string(s.head_dim) + " has no small-seq CUDA kernel (64..512 in steps of 64)";
  if (s.heads_kv >= 1 && s.heads_q / s.heads_kv > kSmallSeqMaxGroup)
    return "heads_q / heads_kv = " + std::to_string(s.heads_q / s.heads_kv) + " exceeds the small-seq kernels' " +
           std::to_string(kSmallSeqMaxGroup) + " query heads per kv head";
  return std::nullopt;
}

Expected<SmallSeqResult> small_seq_cuda(const AttentionProblem& problem, const AttentionInputs& inputs) {
  auto planned = plan_small_seq(problem, inputs);
  if (!planned) return planned.error();
  if (auto reason = small_seq_cuda_unsupported(problem)) return Error{ErrorCode::unsupported, *reason};
  SmallSeqPlan& plan = planned.value();
  DeviceSmallSeqInputs in;
  in.params = small_seq_shape_params(problem, plan);
  const int dtype = in.params.dtype;
  in.backward = problem.shape.backward;
  in.max_keys = plan.max_keys;
  in.q_token = std::move(plan.q_token), in.first_key = std::move(plan.first_key), in.q_pos = std::move(plan.q_pos);
  in.keys = std::move(plan.keys), in.kv_pos = std::move(plan.kv_pos);
  in.q = to_storage(inputs.q, dtype), in.k = to_storage(inputs.k, dtype), in.v = to_storage(inputs.v, dtype);
  if (in.backward) in.d_o = to_storage(inputs.d_o, dtype);
  DeviceSmallSeqOutputs out;
  if (!small_seq_on_device(in, out)) return Error{ErrorCode::unsupported, "CUDA failure: " + out.failure};
  SmallSeqResult r;
  r.o = widen(out.o, dtype);
  r.p.assign(out.p.begin(), out.p.end());
  if (in.backward) r.grads = AttentionGradients{widen(out.dq, dtype), widen(out.dk, dtype), widen(out.dv, dtype)};
  return r;
}

}  // namespace attn_oracle::gpu
