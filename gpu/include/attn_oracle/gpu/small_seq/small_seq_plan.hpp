// small_seq_plan.hpp: the host side shared by the small-seq twin and the CUDA
// wrapper: validation in the order small_seq.hpp documents (batch through the
// production metadata path, heads, documents in order, tensor sizes) and the
// document list the kernels address, built in O(tokens) from the raw runs (not
// from the compacted metadata, which trims runs by the causal rule: a small-seq
// document keeps every key, masked or not, so that P slot j is its j-th kv token).
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_params.hpp"

namespace attn_oracle::gpu {

struct SmallSeqPlan {
  int64_t rows = 0, tq = 0, tkv = 0;  // broadcast rows, T of each side
  int64_t hq = 0, hkv = 0, d = 0;
  std::vector<int64_t> q_token, first_key, q_pos;  // [docs], THD tokens / query position
  std::vector<int32_t> keys;                       // [docs], 1..16
  std::vector<int64_t> kv_pos;                     // [rows * tkv]
  int max_keys = 0;                                // over the documents (0 without any)

  int64_t docs() const { return static_cast<int64_t>(q_token.size()); }
  int64_t q_elems() const { return rows * tq * hq * d; }
  int64_t kv_elems() const { return rows * tkv * hkv * d; }
  int64_t p_elems() const { return docs() * hq * kSmallSeqSlots; }
};

// Errors: the batch's (metadata_twin), bad_heads (and `unsupported` when a head
// count or head_dim does not fit in int), small_seq_query_count /
// small_seq_key_count for the first offending document, bad_tensor_shape.
Expected<SmallSeqPlan> plan_small_seq(const AttentionProblem& problem, const AttentionInputs& inputs);

// Shape, scale, mask and window of the plan; every pointer left null.
SmallSeqParams small_seq_shape_params(const AttentionProblem& problem, const SmallSeqPlan& plan);

}  // namespace attn_oracle::gpu
