// context_parallel_case.hpp: `op: "context_parallel"` cases
// (docs/semantics.md#91-context-parallelism, docs/case-files.md): the fields of an attention case
// (a [B, T] self-attention batch, the shape, the data) and the layout:
//
//   "cp": {"size": 4, "strategy": "ring", "balance": "striped", "stripe": 2}
//   "cp": {"size": 2, "strategy": "all_gather", "balance": "explicit_indices",
//          "indices": [[0, 3, 1, 2]]}
//
// `stripe` only with striped (default 1), `indices` only with explicit_indices.
// eval prints the backend's permutation, every rank's metadata at every step
// and the run's outputs in row order (un-permuted with the backend's
// permutation), or the error. Judged against the oracle: the permutation and
// the metadata exactly, the run by the tolerance rule against the unsharded
// float64 reference, error codes exactly.
// Implemented in cases/src/context_parallel_op.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline cases {

struct ContextParallelCase {
  CpLayout layout;
  AttentionCase call;
  bool operator==(const ContextParallelCase&) const = default;
};

// The "cp" field of a case; Error{bad_case} naming the field.
Expected<CpLayout> cp_layout_from_json(const nlohmann::json& cp);
nlohmann::json cp_layout_to_json(const CpLayout& layout);

// A rank-major result (o, dq [B, T, Hq, D]; lse [B, Hq, T]; dk, dv [B, T, Hkv, D])
// in row order; bad_tensor_shape where an array holds another count (it is put
// back by index).
Expected<AttentionResult> unpermute_result(const CpLayout& layout, const AttentionResult& result,
                                           const std::vector<int64_t>& permutation, const AttentionProblem& problem);

// The first slot of `permutation` ([B, T]) that makes it no permutation of each
// row's tokens ("row 0, slot 3: token 5 is listed already at slot 1"), or "".
std::string permutation_defect(const std::vector<int64_t>& permutation, int64_t rows, int64_t row_tokens);

}  // namespace attn_oracle::cases
