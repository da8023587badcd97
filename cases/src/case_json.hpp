// case_json.hpp (internal): the pieces every op's case-file fields are read and
// written with. Reading never throws out of case_from_json: a malformed field
// throws CaseFieldError here, which case_from_json turns into its Error, with the
// field path in the message ("q.segment_ids[1]", "tensors.k[0][2]").
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline cases::case_json {

using nlohmann::json;

struct CaseFieldError {
  Error error;
};

[[noreturn]] void fail(ErrorCode code, const std::string& message);
[[noreturn]] inline void fail(const std::string& message) { fail(ErrorCode::bad_case, message); }

// The keys of the envelope (case_file.hpp) that every op accepts.
const std::set<std::string>& envelope_keys();
// bad_case naming the first key of `object` that is neither in `known` nor in the envelope.
void reject_unknown_keys(const json& object, const std::set<std::string>& known, const std::string& path = "");

const json& required(const json& object, const char* key, const std::string& path = "");
int64_t int_field(const json& v, const std::string& path, ErrorCode code = ErrorCode::bad_case);
uint64_t seed_field(const json& v, const std::string& path);  // an unsigned 64-bit integer
double number_field(const json& v, const std::string& path);  // finite
bool bool_field(const json& v, const std::string& path);

// Nested arrays <-> (shape, row-major data); arrays deeper than 16 levels and
// ragged ones are bad_case naming the element.
IntArray parse_int_array(const json& j, const std::string& path);
std::vector<double> parse_double_array(const json& j, const std::string& path, Shape& shape);
// A nested array of `shape` over `data`; a flat list when the sizes disagree.
json nest(const Shape& shape, const std::vector<int64_t>& data);
// Floats as JSON numbers, and the values JSON has no number for as strings:
// "-inf" (the lse of a query that attends nothing), "inf", "nan" (never a
// correct output; eval exits non-zero when it prints one).
json nest(const Shape& shape, const std::vector<double>& data);
json float_json(double x);

// The packed batch fields: mask, window, max_segments, q, kv.
const std::set<std::string>& batch_keys();
PackedBatch parse_batch(const json& j);
json batch_to_json(const PackedBatch& batch);
// The attention shape fields: heads_q, heads_kv, head_dim, dtype, scale, backward.
const std::set<std::string>& shape_keys();
AttentionShape parse_shape(const json& j);
json shape_to_json(const AttentionShape& shape);

}  // namespace attn_oracle::cases::case_json
