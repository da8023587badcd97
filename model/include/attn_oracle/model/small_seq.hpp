// small_seq.hpp: the small-sequence attention problem of
// docs/semantics.md#8-small-sequence-problems (data model and validation; the float64 reference is
// attn_oracle/reference/small_seq.hpp).
//
// A small-seq problem is an AttentionProblem whose every q document (a run of one
// nonzero id on the q side of a broadcast row) has exactly one query token, and
// whose kv side holds 1..16 tokens of that id. Documents are numbered in row-major
// order over the broadcast rows, then by position in the row; kv documents with
// no query are ignored. The mask and window apply exactly as in
// docs/semantics.md#2-the-attention-mask (a query whose keys are all masked gets o = 0 and a zero P
// row).
//
// Outputs: o and, for backward, dq / dk / dv in the AttentionResult layouts; P
// instead of the log-sum-exp: [docs, heads_q, 16], slot j = the softmax weight of
// the document's j-th key token (in row order), exactly 0 past its keys and where
// masked.
//
// Validation order: the batch (docs/semantics.md#1-inputs), then the heads (bad_heads), then
// documents in order (small_seq_query_count, small_seq_key_count), then tensor
// sizes (bad_tensor_shape).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline model {

inline constexpr int64_t kSmallSeqMaxKeys = 16;

struct SmallSeqResult {
  std::vector<double> o;  // [R, Tq, Hq, D]
  std::vector<double> p;  // [docs, Hq, 16]
  std::optional<AttentionGradients> grads;  // present iff shape.backward
};

// One document of a small-seq problem: where its query and keys are.
struct SmallSeqDocument {
  int64_t row = 0;        // broadcast row
  int64_t query = 0;      // token of the query in the row
  int64_t first_key = 0;  // first kv token of the document in the row
  int64_t keys = 0;       // 1..16
};

// Validates the problem as a small-seq problem and lists its documents.
Expected<std::vector<SmallSeqDocument>> small_seq_documents(const AttentionProblem& problem,
                                                            const AttentionInputs* inputs = nullptr);

}  // namespace attn_oracle::model
