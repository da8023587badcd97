// reference/attention.hpp: the float64 attention reference (DESIGN section 5),
// computed two independent ways (reference_attention.cpp):
//  - attention_dense_masked: every row against the explicit [Tq, Tkv] mask of
//    DESIGN section 3 (window included), on positions and ids.
//  - attention_per_document: every compacted document (cu_seqlens/ragged_offsets)
//    with the kernels' index rule on its trimmed runs.
// They agree on representable inputs (tests/reference_attention_test.cpp, at
// 1e-12 relative); the backward is checked against central finite differences
// there too. The data model (problem, tensors, validation) is attn_oracle/attention.hpp.
#pragma once

#include "attn_oracle/attention.hpp"
#include "attn_oracle/error.hpp"

namespace attn_oracle::ref {

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem,
                                                 const AttentionInputs& inputs);
Expected<AttentionResult> attention_per_document(const AttentionProblem& problem,
                                                 const AttentionInputs& inputs);

}  // namespace attn_oracle::ref
