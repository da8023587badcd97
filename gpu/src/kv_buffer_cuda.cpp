// kv_buffer_cuda.cpp: the `cuda` backend's K/V buffer primitives
// (docs/semantics.md#3-metadata): the seam's doubles to fp32 device buffers and back around the
// kernels of kv_buffer_kernels.cu; the driver (kv_buffer_stream.cpp) runs the
// fused attention on them with attention_cuda. `unsupported` for what the
// attention kernels lack (fp32 storage, head dims other than 64 / 128 / 256).
// Checked by the kv_buffer properties on the `cuda` backend when a device is present.
#include <string>

#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/kv_buffer.hpp"
#include "attn_oracle/gpu/kv_buffer_device.hpp"
#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle::gpu {
namespace {

std::vector<float> narrow(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

Error cuda_failure(const std::string& what) { return Error{ErrorCode::unsupported, "CUDA failure: " + what}; }

}  // namespace

std::optional<std::string> kv_buffer_cuda_unsupported(const KvBufferProblem& problem) {
  if (!cuda_available()) return "no CUDA device on this machine";
  // The attention kernels decide: asked on a one-document problem of this shape.
  AttentionProblem probe;
  probe.batch.mask = MaskKind::causal_bottom_right;
  probe.batch.q = PackedSide{IntArray({1, 1}, {1}), IntArray({1, 1}, {0})};
  probe.batch.kv = probe.batch.q;
  probe.shape = problem.shape;
  return attention_cuda_unsupported(probe);
}

Expected<MicroSequenceMetadata> plan_micro_sequence_cuda(const KvBufferProblem& problem, int64_t i) {
  std::vector<int64_t> starts{0};
  for (int64_t l : problem.doc_lengths) starts.push_back(starts.back() + l);
  DeviceMicroSequencePlan plan;
  std::string failure;
  if (!kv_plan_on_device(starts, problem.micro_seq_tokens, i, plan, failure)) return cuda_failure(failure);
  MicroSequenceMetadata out;
  out.index = i, out.begin = plan.begin, out.end = plan.end, out.first_document_begin = plan.first_document_begin;
  out.cu_seqlens_q = std::move(plan.cu_seqlens_q), out.cu_seqlens_k = std::move(plan.cu_seqlens_k);
  out.q_document = std::move(plan.q_document), out.q_position = std::move(plan.q_position);
  out.kv_document = std::move(plan.kv_document), out.kv_position = std::move(plan.kv_position);
  return out;
}

std::optional<Error> write_slice_cuda(int64_t begin, const std::vector<double>& slice, std::vector<double>& buffer,
                                      int64_t row) {
  std::vector<float> device_buffer = narrow(buffer);
  std::string failure;
  if (!kv_write_slice_on_device(begin, narrow(slice), device_buffer, row, failure)) {
    if (failure == "out of bounds")
      return Error{ErrorCode::kv_buffer_slice_out_of_bounds, "the write kernel refused a slice at " + std::to_string(begin)};
    return cuda_failure(failure);
  }
  buffer.assign(device_buffer.begin(), device_buffer.end());
  return std::nullopt;
}

std::optional<Error> accumulate_grads_cuda(int64_t first, const std::vector<double>& dk, const std::vector<double>& dv,
                                           std::vector<double>& grad_buffer, int64_t row_kv) {
  std::vector<float> grad = narrow(grad_buffer);
  std::string failure;
  if (!kv_accumulate_on_device(first, narrow(dk), narrow(dv), grad, row_kv, failure)) return cuda_failure(failure);
  grad_buffer.assign(grad.begin(), grad.end());
  return std::nullopt;
}

}  // namespace attn_oracle::gpu
