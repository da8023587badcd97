// validator_bugs.cpp: see validator_bugs.hpp. Each planted validator is the
// model's, run on an input rewritten so that the model's answer is the mutant's
// (or, for the divisibility mutant, the model's divisibility step written out
// again with the one mistake).
#include "planted/validator_bugs.hpp"

#include <cstdlib>

namespace attn_oracle::planted {
namespace {

// The model's divisibility step (model/src/sharding.cpp) with K's sequence dim
// divided into q_len; every other step is the model's.
std::optional<Error> k_sequence_split_against_q_len(const Sharding& s, const ShardedShapes& z) {
  std::optional<Error> e = validate_sharding(s, z);
  if (!e || e->code != ErrorCode::sharding_not_divisible) return e;
  constexpr const char* kDimNames[] = {"batch", "sequence", "heads", "head_dim"};
  const std::pair<const char*, const PartitionSpec*> tensors[] = {{"q", &s.q}, {"k", &s.k}, {"v", &s.v}};
  for (const auto& [name, spec] : tensors) {
    const std::string tensor = name;
    const int64_t sequence = tensor == "q" || tensor == "k" ? z.q_len : z.kv_len;  // the bug: k reads q_len
    const int64_t heads = tensor == "q" ? z.heads_q : z.heads_kv;
    const int64_t sizes[] = {z.batch, sequence, heads, z.head_dim};
    for (int64_t d = 0; d < kQkvRank; ++d) {
      const int64_t n = shard_count(s.mesh, spec->dims[d]);
      if (sizes[d] % n == 0) continue;
      const std::string at = tensor + " dim " + std::to_string(d) + " (" + kDimNames[d] + ")";
      if (e->message.starts_with(at)) return e;  // the same dim as the model: its message exactly
      return Error{ErrorCode::sharding_not_divisible, at + " has size " + std::to_string(sizes[d]) +
                                                          ", not divisible by its " + std::to_string(n) + " shards"};
    }
  }
  return e;  // unreachable: the model found an indivisible dim, and so does the loop
}

// Positions rewritten so that an equal step inside a document rises by one and
// every other comparison keeps its answer: p -> p * K + j, where j counts the
// equal steps of the current run and K exceeds any run.
Expected<BatchLayout> equal_positions_accepted(const PackedBatch& batch) {
  PackedBatch b = batch;
  for (PackedSide* side : {&b.q, &b.kv}) {
    const Shape& shape = side->segment_ids.shape;
    if (shape.size() < 2 || side->segment_pos.shape != shape || side->segment_ids.data.size() != side->segment_pos.data.size())
      continue;  // broadcast positions: left to the model
    const int64_t T = shape.back();
    const int64_t K = T + 1;
    bool small = true;
    for (int64_t p : side->segment_pos.data) small = small && std::llabs(p) < (int64_t{1} << 40);
    if (!small || T == 0) continue;
    std::vector<int64_t>& pos = side->segment_pos.data;
    const std::vector<int64_t> before = pos;
    const std::vector<int64_t>& ids = side->segment_ids.data;
    for (size_t row = 0; row * T < ids.size(); ++row) {
      int64_t run = 0;
      for (int64_t t = 0; t < T; ++t) {
        const size_t i = row * T + t;
        const bool equal_step = t > 0 && ids[i] != 0 && ids[i] == ids[i - 1] && before[i] == before[i - 1];
        run = equal_step ? run + 1 : 0;
        pos[i] = before[i] * K + run;
      }
    }
  }
  return validate(b);
}

// The model's validator with K and V made equal when K alone meets the GQA/MQA
// exception (equal to Q but for its unsharded heads): V is never compared.
std::optional<Error> gqa_exception_without_k_v_comparison(const Sharding& s, const ShardedShapes& z) {
  std::optional<Error> e = validate_sharding(s, z);
  if (!e || e->code != ErrorCode::sharding_spec_mismatch) return e;
  Sharding only_k = s;
  only_k.v = s.k;
  return uses_gqa_head_exception(only_k) ? validate_sharding(only_k, z) : e;
}

}  // namespace

std::vector<ValidatorBug> validator_bugs() {
  const std::string sharding_rejects = "sharding/invalidTriplesAreRejectedWithTheExactMessage";
  const std::string metadata_rejects = "metadata/rejectsInvalidInputsWithTheirCode";
  ReferenceCalls k_sequence, equal_positions, gqa;
  k_sequence.validate_sharding = k_sequence_split_against_q_len;
  equal_positions.validate_batch = equal_positions_accepted;
  gqa.validate_sharding = gqa_exception_without_k_v_comparison;
  return {{"model_k_sequence_split_against_q_len", sharding_rejects, k_sequence},
          {"model_accepts_equal_positions", metadata_rejects, equal_positions},
          {"model_gqa_exception_without_k_v_comparison", sharding_rejects, gqa}};
}

}  // namespace attn_oracle::planted
