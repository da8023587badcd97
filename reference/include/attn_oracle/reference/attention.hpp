// reference/attention.hpp: the float64 attention reference
// (docs/semantics.md#5-attention-outputs-and-gradients), computed two independent ways
// (reference_attention.cpp):
//  - attention_dense_masked: every row against the explicit [Tq, Tkv] mask of
//    docs/semantics.md#2-the-attention-mask (window included), on positions and ids.
//  - attention_per_document: every compacted document (cu_seqlens/ragged_offsets)
//    with the kernels' index rule on its trimmed runs.
// They agree on representable inputs (tests/reference_attention_test.cpp, at
// 1e-12 relative); the backward is checked against central finite differences
// there too. Both run Eigen block products on query tiles (reference/src/
// attention_tiles.hpp); the scalar loops they replaced are kept as a test and
// benchmark cross-check (reference/scalar/). The data model (problem, tensors,
// validation) is attn_oracle/model/attention.hpp.
//
// Threads: reference_threads() (attn_oracle/model/memory_budget.hpp:
// ATTN_ORACLE_THREADS or set_reference_threads, default 1). The per-document
// reference shares out (row, kv head) pairs, the dense one a row's kv heads;
// results are bitwise the same for every thread count and run, each worker
// adding its own scratch to the memory the budget is asked for.
#pragma once

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::ref {

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem,
                                                 const AttentionInputs& inputs);
Expected<AttentionResult> attention_per_document(const AttentionProblem& problem,
                                                 const AttentionInputs& inputs);

}  // namespace attn_oracle::ref
