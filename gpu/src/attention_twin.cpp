// attention_twin.cpp: placeholder, being written.
#include "attn_oracle/gpu/attention.hpp"
namespace attn_oracle::gpu {
Expected<AttentionResult> attention_twin(const AttentionProblem&, const AttentionInputs&) {
  return Error{ErrorCode::unsupported, "attention twin not built yet"};
}
std::optional<Error> attention_twin_into(const AttentionProblem&, const AttentionInputs&, const AttentionOutputs&) {
  return Error{ErrorCode::unsupported, "attention twin not built yet"};
}
}  // namespace attn_oracle::gpu
