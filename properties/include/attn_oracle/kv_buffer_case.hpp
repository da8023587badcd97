// kv_buffer_case.hpp: `op: "kv_buffer"` case files (DESIGN sections 7 and 9).
//
//   {"schema": "attn-oracle.case/1", "op": "kv_buffer", "note": "...",
//    "doc_lengths": [4, 1, 10], "micro_seq_tokens": 4,
//    "heads_q": 2, "heads_kv": 1, "head_dim": 8, "dtype": "fp32", "scale": null,
//    "backward": true, "data": {"seed": 7}, "expected": {...}}
//
// Data comes from the seed only (generate_kv_buffer_inputs: generate_inputs of the
// whole-sequence problem, so q, k, v, do are [N, H, D] in that order). `attn-oracle
// eval` prints, per micro-sequence, its canonical metadata, then the streaming
// result: o [N][Hq][D], lse [Hq][N] (null for -inf) and, with backward, dq, and
// dk, dv [N][Hkv][D] read off the final gradient buffer.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"

namespace attn_oracle {

// Reads the kv_buffer fields into c.kv_buffer and c.data_seed (unknown keys are bad_case).
std::optional<Error> parse_kv_buffer_fields(const nlohmann::json& j, Case& c);
nlohmann::json kv_buffer_case_to_json(const Case& c);

// The inputs of a kv_buffer case.
Expected<AttentionInputs> kv_buffer_inputs(const Case& c);

nlohmann::json micro_sequence_to_json(const MicroSequenceMetadata& md);
// {"micro_sequences": [...], "o", "lse", ("dq", "dk", "dv")}.
nlohmann::json kv_buffer_result_to_json(const KvBufferProblem& problem, const std::vector<MicroSequenceMetadata>& plans,
                                        const AttentionResult& r);

// Everything `eval` prints for a kv_buffer case on one capability: every
// micro-sequence's metadata, then the stream (or the first error as {"error": ...}).
nlohmann::json evaluate_kv_buffer_case(KvBufferCapability& capability, const Case& c);

// `attn-oracle replay` of a kv_buffer case: the backend's metadata exactly and its
// stream by the tolerance rule against the whole-sequence oracle, then the
// reference against the case's `expected`. Prints PASS / FAIL and the lines;
// returns the exit code (0 pass, 3 fail, 1 when the backend cannot run it).
int replay_kv_buffer_case(Backend& backend, const Case& c, std::ostream& os);

}  // namespace attn_oracle
