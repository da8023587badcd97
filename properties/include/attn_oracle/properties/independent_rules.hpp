// independent_rules.hpp: a second statement of every validity rule the suite
// enforces (docs/semantics.md#4-error-codes), written apart from model/ so that a
// mistake in the model's validators is not also the properties' expectation.
//
//  - Sharding: a declarative table, one row per rule in precedence order (the
//    divisibility rules one row per tensor dim, naming the size it divides);
//    independent_rules/sharding_rules.cpp.
//  - Batches: a brute-force predicate per rule over the token sequence of each
//    side of each broadcast row ("some earlier token of the document holds a
//    position at or above this one"), not the model's one-pass scans;
//    independent_rules/batch_rules.cpp.
//
// Both give the code and what the model's message must name (the tensor dim,
// the spec, the side, row and token), since some mistakes change only that: K's
// sequence split checked against q_len instead of kv_len still gives
// sharding_not_divisible, on V's sequence dim instead of K's.
//
// The properties take their expected answer from here and compare it with the
// model's validators (through reference_calls(), so that a test can plant a bug in
// those) on every draw: agreed_sharding_verdict / agreed_batch_verdict fail the
// case naming both answers where the two disagree, and classify the edge of
// the rule the draw sits on ("edge ..." labels, counted by `attn-oracle
// coverage`). Nothing here includes model/'s validator headers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/model/sharding.hpp"

namespace attn_oracle::inline properties {

struct CheckRecord;  // property_check.hpp

// A rule broken: its code, the rule in words and what the model's message must
// start with and hold ("" for nothing).
struct RuleVerdict {
  ErrorCode code;
  std::string rule;
  std::string starts_with, contains;
  bool named_by(const std::string& message) const;
  // "sharding_not_divisible (k sequence divides by its shard count; naming "k dim 1 (sequence) ...")"
  std::string describe() const;
};

// The first rule (in precedence order) a sharded call breaks; nullopt when valid.
std::optional<RuleVerdict> sharding_rules_verdict(const Sharding& sharding, const ShardedShapes& shapes);

// The first rule (in precedence order) a packed batch breaks; nullopt when valid.
std::optional<RuleVerdict> batch_rules_verdict(const PackedBatch& batch);

// The edges of the rules a draw sits on, as coverage labels ("edge K/V split
// along the sequence, q_len != kv_len", "edge equal positions in a document", ...).
std::vector<std::string> sharding_rule_edges(const Sharding& sharding, const ShardedShapes& shapes);
std::vector<std::string> batch_rule_edges(const PackedBatch& batch);

// Inside a property check: the independent verdict, after failing the case when
// reference_calls().validate_sharding / validate_batch disagrees with it (code, or what
// the message names). Classifies the draw's rule edges in the check's record.
std::optional<RuleVerdict> agreed_sharding_verdict(const Sharding& sharding, const ShardedShapes& shapes,
                                                   CheckRecord& record);
std::optional<RuleVerdict> agreed_batch_verdict(const PackedBatch& batch, CheckRecord& record);

}  // namespace attn_oracle::properties
