// small_seq_cuda_unavailable.cpp: the CUDA small-seq entry points of a build without CUDA.
#include "attn_oracle/gpu/small_seq.hpp"

namespace attn_oracle::gpu {

std::optional<std::string> small_seq_cuda_unsupported(const AttentionProblem&) {
  return "this build has no CUDA (configure with nvcc present)";
}
Expected<SmallSeqResult> small_seq_cuda(const AttentionProblem&, const AttentionInputs&) {
  return Error{ErrorCode::unsupported, "this build has no CUDA (configure with nvcc present)"};
}

}  // namespace attn_oracle::gpu
