// small_seq.hpp: host entry points of the small-sequence kernels
// (docs/semantics.md#8-small-sequence-problems): the CPU twin and the CUDA kernels, sharing the
// per-(document, head) code in gpu/include/attn_oracle/gpu/small_seq/.
#pragma once

#include <optional>
#include <string>

#include "attn_oracle/model/small_seq.hpp"

namespace attn_oracle::gpu {

Expected<SmallSeqResult> small_seq_twin(const AttentionProblem& problem, const AttentionInputs& inputs);

std::optional<std::string> small_seq_cuda_unsupported(const AttentionProblem& problem);
Expected<SmallSeqResult> small_seq_cuda(const AttentionProblem& problem, const AttentionInputs& inputs);

}  // namespace attn_oracle::gpu
