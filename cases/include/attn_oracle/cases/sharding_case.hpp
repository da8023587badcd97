// sharding_case.hpp: `op: "sharding"` cases (docs/semantics.md#9-sharding and
// docs/semantics.md#11-where-each-concept-lives-in-the-code).
//
//   "mesh":  [["fsdp", 4], ["context", 1]]            axes in mesh order
//   "specs": {"q": ["fsdp", null, null, null], "k": [...], "v": [...],
//             "segment_ids": ["fsdp", null]}          a dim is null, "axis" or ["a", "b"]
// then either
//   "shapes": {"batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim"}
// (validation only: eval prints {"ok": true} or the error), or the fields of an
// attention case (attention_case.hpp), whose [B, T] batch gives the shapes: eval
// runs the sharded attention and prints it as an attention result. Error codes
// and messages are judged exactly (docs/semantics.md#9-sharding pins the message), a run by
// the tolerance rule against the unsharded float64 reference.
// Implemented in cases/src/sharding_op.cpp.
#pragma once

#include <variant>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/sharding.hpp"

namespace attn_oracle::inline cases {

struct ShardingCase {
  Sharding sharding;
  std::variant<ShardedShapes, AttentionCase> call;  // validate only, or run
  bool operator==(const ShardingCase&) const = default;
};

// "mesh" and "specs" of a case; Error{bad_case} naming the field.
Expected<Sharding> sharding_from_json(const nlohmann::json& case_json);
nlohmann::json mesh_to_json(const Mesh& mesh);
nlohmann::json specs_to_json(const Sharding& sharding);

}  // namespace attn_oracle::cases
