// case.hpp: a case (docs/case-files.md): one op's payload in the envelope of a
// case file (note, the property record of a counterexample, expected). The
// types alone; reading and writing files is case_file.hpp, what is done with a
// case is its op (case_op.hpp).
#pragma once

#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/cases/context_parallel_case.hpp"
#include "attn_oracle/cases/kv_buffer_case.hpp"
#include "attn_oracle/cases/metadata_case.hpp"
#include "attn_oracle/cases/sharding_case.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline cases {

inline constexpr const char* kCaseSchema = "attn-oracle.case/2";
inline constexpr const char* kCaseSchemaV1 = "attn-oracle.case/1";  // read, never written

using CasePayload =
    std::variant<MetadataCase, AttentionCase, SmallSeqCase, KvBufferCase, ShardingCase, ContextParallelCase>;

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

// The attention fields of a payload that has them (attention, small_seq, a
// sharding case that runs, a context-parallel case); nullptr otherwise.
const AttentionCase* attention_fields(const CasePayload& payload);
AttentionCase* attention_fields(CasePayload& payload);

nlohmann::json error_to_json(const Error& e);  // {"error": {"code", "message"}}

}  // namespace attn_oracle::cases
