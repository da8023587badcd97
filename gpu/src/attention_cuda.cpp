// attention_cuda.cpp: placeholder, being written.
#include "attn_oracle/gpu/attention.hpp"
namespace attn_oracle::gpu {
std::optional<std::string> attention_cuda_unsupported(const AttentionProblem&) { return "not built yet"; }
Expected<AttentionResult> attention_cuda(const AttentionProblem&, const AttentionInputs&) {
  return Error{ErrorCode::unsupported, "not built yet"};
}
std::optional<Error> attention_cuda_into(const AttentionProblem&, const AttentionInputs&, const AttentionOutputs&) {
  return Error{ErrorCode::unsupported, "not built yet"};
}
}  // namespace attn_oracle::gpu
