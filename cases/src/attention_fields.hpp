// attention_fields.hpp (internal): the fields attention, small_seq and running
// sharding cases share (attention_case.hpp): the batch, the shape, and the data
// seed or explicit tensors. Implemented in attention_op.cpp.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/attention_case.hpp"

namespace attn_oracle::inline cases::case_json {

// batch_keys() + shape_keys() + data, tensors.
const std::set<std::string>& attention_keys();
AttentionCase parse_attention_case(const nlohmann::json& j);
nlohmann::json attention_case_to_json(const AttentionCase& c);

}  // namespace attn_oracle::cases::case_json
