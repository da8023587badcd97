// case_file.hpp: case files (docs/case-files.md), `attn-oracle.case/2`.
//
// A case is an envelope and one op's payload:
//   {"schema": "attn-oracle.case/2", "op": "<op>", "note": "...",
//    <the op's fields>,
//    "property": {"id": ..., "backend": ..., "backend_version": ..., "seed": N, "drawn": {...}},
//    "expected": <what eval prints on the reference, or {"error": {"code": ...}}>}
// `property` is written with a counterexample: the check that failed, on which
// backend, from which seed, and every value the property drew besides the case
// (a document permutation, padding, a command sequence); `attn-oracle replay`
// re-runs exactly that check. A case without one (a hand-written fixture) is
// replayed as the backend against the reference. Files of schema
// `attn-oracle.case/1` (no `property`) read the same way.
//
// Each op's fields, evaluation, judgement and coverage live in one place (its
// CaseOp, case_op.hpp): metadata_case, attention_case (attention and small_seq),
// kv_buffer_case, sharding_case.
//
// Reading never throws: a malformed file gives Error{bad_case | bad_mask |
// bad_window | bad_tensor_shape} naming the field.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "attn_oracle/attention_case.hpp"
#include "attn_oracle/error.hpp"
#include "attn_oracle/kv_buffer_case.hpp"
#include "attn_oracle/metadata_case.hpp"
#include "attn_oracle/sharding_case.hpp"

namespace attn_oracle {

inline constexpr const char* kCaseSchema = "attn-oracle.case/2";
inline constexpr const char* kCaseSchemaV1 = "attn-oracle.case/1";  // read, never written

using CasePayload = std::variant<MetadataCase, AttentionCase, SmallSeqCase, KvBufferCase, ShardingCase>;

// What a counterexample needs to re-run the check that failed.
struct PropertyRecord {
  std::string id;                                    // "attention/documentPermutationInvariance"
  std::string backend, backend_version;              // where it failed
  uint64_t seed = 0;                                 // the run's seed
  nlohmann::json drawn = nlohmann::json::object();   // values drawn besides the case
  bool operator==(const PropertyRecord&) const = default;
};

struct Case {
  CasePayload payload;
  std::string note;
  std::optional<PropertyRecord> property;
  std::optional<nlohmann::json> expected;

  template <class Payload>
  const Payload* as() const { return std::get_if<Payload>(&payload); }
  bool operator==(const Case&) const = default;
};

class CaseOp;
const CaseOp& op_of(const Case& c);  // case_op.hpp

Expected<Case> case_from_json(const nlohmann::json& j);
Expected<Case> read_case_file(const std::string& path);
nlohmann::json case_to_json(const Case& c);
// One key per line in a fixed order, arrays of numbers on one line.
bool write_case_file(const std::string& path, const Case& c);

// The attention fields of a payload that has them (attention, small_seq, a
// sharding case that runs); nullptr otherwise.
const AttentionCase* attention_fields(const CasePayload& payload);
AttentionCase* attention_fields(CasePayload& payload);

nlohmann::json error_to_json(const Error& e);  // {"error": {"code", "message"}}

}  // namespace attn_oracle
