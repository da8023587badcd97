// attention_case.hpp: `op: "attention"` and `op: "small_seq"` cases
// (docs/semantics.md#5-attention-outputs-and-gradients and
// docs/semantics.md#8-small-sequence-problems, docs/case-files.md): the batch fields, heads_q,
// heads_kv, head_dim, dtype, optional scale and backward, then either `data: {"seed": N}`
// (generate_inputs) or `tensors: {q, k, v, do}` as nested arrays [extra..][B][T][H][D]. Explicit
// tensors are kept as written and rounded to the dtype when the inputs are built, so that files
// round-trip and the reference computes what the device was asked to compute.
//
// attention: judged by the tolerance rule against ref::attention_dense_masked,
// on representable inputs for backends that realise the index rule
// (docs/semantics.md#the-kernels-index-rule-and-representability). small_seq: o, P and the
// gradients by the tolerance rule against ref::small_seq. Implemented in
// cases/src/attention_op.cpp.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/small_seq.hpp"

namespace attn_oracle::inline cases {

struct AttentionCase {
  AttentionProblem problem;
  std::optional<uint64_t> data_seed;       // data: {"seed": N}
  std::optional<AttentionInputs> tensors;  // tensors: {q, k, v, do}, as written
  bool operator==(const AttentionCase&) const = default;
};

// The same fields; a different op (one query per document, P instead of lse).
struct SmallSeqCase : AttentionCase {
  bool operator==(const SmallSeqCase&) const = default;
};

// The case's inputs: generated from the seed, or its tensors rounded to the dtype.
Expected<AttentionInputs> attention_inputs(const AttentionCase& c);

// o [..][B][Tq][Hq][D], lse [..][B][Hq][Tq] (null for -inf) and, with backward, dq, dk, dv.
nlohmann::json attention_result_to_json(const AttentionProblem& problem, const AttentionResult& r);
// o, p [docs][Hq][16] and, with backward, dq, dk, dv.
nlohmann::json small_seq_result_to_json(const AttentionProblem& problem, const SmallSeqResult& r);

}  // namespace attn_oracle::cases
