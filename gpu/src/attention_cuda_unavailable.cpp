// attention_cuda_unavailable.cpp: the CUDA attention entry points of a build without CUDA.
#include "attn_oracle/gpu/attention.hpp"

namespace attn_oracle::gpu {

std::optional<std::string> attention_cuda_unsupported(const AttentionProblem&) {
  return "this build has no CUDA (configure with nvcc present)";
}
Expected<AttentionResult> attention_cuda(const AttentionProblem&, const AttentionInputs&, FlashArch) {
  return Error{ErrorCode::unsupported, "this build has no CUDA (configure with nvcc present)"};
}
std::optional<Error> attention_cuda_into(const AttentionProblem&, const AttentionInputs&, const AttentionOutputs&,
                                         FlashArch) {
  return Error{ErrorCode::unsupported, "this build has no CUDA (configure with nvcc present)"};
}
bool attention_cuda_sm90_available() { return false; }

}  // namespace attn_oracle::gpu
