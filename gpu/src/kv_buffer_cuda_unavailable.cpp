// kv_buffer_cuda_unavailable.cpp: the CUDA K/V buffer primitives of a build without CUDA.
#include "attn_oracle/gpu/kv_buffer.hpp"

namespace attn_oracle::gpu {
namespace {
const char* kNoCuda = "this build has no CUDA (configure with nvcc present)";
}

std::optional<std::string> kv_buffer_cuda_unsupported(const KvBufferProblem&) { return kNoCuda; }
Expected<MicroSequenceMetadata> plan_micro_sequence_cuda(const KvBufferProblem&, int64_t) {
  return Error{ErrorCode::unsupported, kNoCuda};
}
std::optional<Error> write_slice_cuda(int64_t, const std::vector<double>&, std::vector<double>&, int64_t) {
  return Error{ErrorCode::unsupported, kNoCuda};
}
std::optional<Error> accumulate_grads_cuda(int64_t, const std::vector<double>&, const std::vector<double>&,
                                           std::vector<double>&, int64_t) {
  return Error{ErrorCode::unsupported, kNoCuda};
}

}  // namespace attn_oracle::gpu
