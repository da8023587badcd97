// kv_buffer_case.hpp: `op: "kv_buffer"` cases (docs/semantics.md#3-metadata and
// docs/semantics.md#11-where-each-concept-lives-in-the-code).
//
//   {"schema": ..., "op": "kv_buffer", "note": "...",
//    "doc_lengths": [4, 1, 10], "micro_seq_tokens": 4,
//    "heads_q": 2, "heads_kv": 1, "head_dim": 8, "dtype": "fp32", "scale": null,
//    "backward": true, "data": {"seed": 7}, "expected": {...}}
//
// Data comes from the seed only (generate_kv_buffer_inputs: generate_inputs of the
// whole-sequence problem, so q, k, v, do are [N, H, D] in that order). `attn-oracle
// eval` prints, per micro-sequence, its canonical metadata, then the streaming
// result: o [N][Hq][D], lse [Hq][N] (null for -inf) and, with backward, dq, and
// dk, dv [N][Hkv][D] read off the final gradient buffer. Judged: the metadata
// exactly, the stream by the tolerance rule against the whole-sequence oracle.
// Implemented in cases/src/kv_buffer_op.cpp.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/model/kv_buffer.hpp"

namespace attn_oracle::inline cases {

struct KvBufferCase {
  KvBufferProblem problem;
  uint64_t data_seed = 0;
  bool operator==(const KvBufferCase&) const = default;
};

AttentionInputs kv_buffer_inputs(const KvBufferCase& c);

nlohmann::json micro_sequence_to_json(const MicroSequenceMetadata& md);
// {"micro_sequences": [...], "o", "lse", ("dq", "dk", "dv")}.
nlohmann::json kv_buffer_result_to_json(const KvBufferProblem& problem, const std::vector<MicroSequenceMetadata>& plans,
                                        const AttentionResult& r);

}  // namespace attn_oracle::cases
