// small_seq.cpp: placeholder, being written.
#include "attn_oracle/small_seq.hpp"
namespace attn_oracle {
Expected<std::vector<SmallSeqDocument>> small_seq_documents(const AttentionProblem&, const AttentionInputs*) {
  return Error{ErrorCode::unsupported, "small_seq not built yet"};
}
namespace ref {
Expected<SmallSeqResult> small_seq(const AttentionProblem&, const AttentionInputs&) {
  return Error{ErrorCode::unsupported, "small_seq not built yet"};
}
}  // namespace ref
}  // namespace attn_oracle
