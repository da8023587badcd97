// error.cpp: spelling of the error codes (the strings are part of the contract).
#include "attn_oracle/model/error.hpp"

#include <array>

namespace attn_oracle::inline model {
namespace {
constexpr std::array<std::string_view, 40> kNames = {
    "bad_mask",          "bad_window",
    "bad_max_segments",  "rank_mismatch",
    "shape_mismatch",    "extra_dims_mismatch",
    "negative_id",       "noncontiguous_segment",
    "too_many_segments", "ids_out_of_order",
    "padding_with_non_padding_mask", "positions_not_increasing",
    "negative_position", "bad_case",
    "bad_heads",         "bad_tensor_shape",
    "unsupported",       "small_seq_query_count",
    "small_seq_key_count",
    "kv_buffer_document_length", "kv_buffer_micro_seq_tokens",
    "kv_buffer_slice_out_of_bounds",
    "sharding_bad_mesh", "sharding_bad_spec", "sharding_unknown_axis", "sharding_repeated_axis",
    "sharding_spec_mismatch", "sharding_segment_ids_mismatch", "sharding_not_divisible",
    "sharding_kv_heads_not_divisible", "over_memory_budget", "bad_metadata",
    "non_finite_input", "value_overflow",
    "cp_bad_layout", "cp_not_self_attention", "cp_heads_not_divisible", "cp_not_divisible",
    "cp_document_not_divisible", "cp_bad_permutation",
};
static_assert(kNames.size() == static_cast<size_t>(ErrorCode::cp_bad_permutation) + 1);
}  // namespace

std::string_view to_string(ErrorCode code) { return kNames[static_cast<size_t>(code)]; }

std::optional<ErrorCode> error_code_from_string(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<ErrorCode>(i);
  return std::nullopt;
}

}  // namespace attn_oracle::model
