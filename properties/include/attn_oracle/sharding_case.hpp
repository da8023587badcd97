// sharding_case.hpp: the JSON of `op: "sharding"` case files and what eval does
// with them (DESIGN sections 8 and 9).
//
//   "mesh":  [["fsdp", 4], ["context", 1]]            axes in mesh order
//   "specs": {"q": ["fsdp", null, null, null], "k": [...], "v": [...],
//             "segment_ids": ["fsdp", null]}          a dim is null, "axis" or ["a", "b"]
// then either
//   "shapes": {"batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim"}
// (validation only: eval prints {"ok": true} or the error), or the fields of an
// attention case (mask, max_segments, q, kv, heads, dtype, data or tensors),
// whose [B, T] batch gives the shapes: eval runs the sharded attention and
// prints it as an attention result.
//
// Tested by tests/sharding_test.cpp (round trips, errors) and the fixtures.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/sharding.hpp"

namespace attn_oracle {

// "mesh" and "specs" of a case; Error{bad_case} naming the field.
Expected<Sharding> sharding_from_json(const nlohmann::json& case_json);
nlohmann::json mesh_to_json(const Mesh& mesh);
nlohmann::json specs_to_json(const Sharding& sharding);

Expected<ShardedShapes> shapes_from_json(const nlohmann::json& shapes);
nlohmann::json shapes_to_json(const ShardedShapes& shapes);

// An op sharding case on `cap`: the validation of a shapes-only case (nullopt
// result = accepted), or the sharded attention of a case with a batch.
Expected<std::optional<AttentionResult>> evaluate_sharding_case(ShardingCapability& cap, const Case& c);

// What eval prints for that: {"ok": true}, the attention result, or the error.
nlohmann::json sharding_evaluation_to_json(const Case& c, const Expected<std::optional<AttentionResult>>& e);

}  // namespace attn_oracle
