// error.hpp: the stable error codes of docs/semantics.md#4-error-codes and a small Expected<T>.
//
// Codes are compared exactly by every property, so their spelling is part of the
// contract: `to_string(code)` is what case files and `attn-oracle eval` print.
// The enum order is the precedence order of docs/semantics.md#input-validation-in-precedence-order
// (whole-input codes, then per-row codes); codes past `positions_not_increasing` are ours:
//   negative_position   a position < 0 (docs/semantics.md#1-inputs requires >= 0 but names no code)
//   bad_case            a case file that cannot be read (JSON, types, ragged arrays)
//   bad_heads           heads_q % heads_kv != 0, or a zero head count / head dim
//   bad_tensor_shape    explicit tensors whose shape disagrees with the problem
//   unsupported         a backend does not support this combination
//   small_seq_query_count  a small-seq document with other than one query token
//   small_seq_key_count    a small-seq document with 0 or more than 16 keys
//   kv_buffer_document_length     a K/V-buffer sequence with no documents or a length < 1
//   kv_buffer_micro_seq_tokens    a micro-sequence size m < 1
//   kv_buffer_slice_out_of_bounds a micro-sequence or slice outside the buffer
//   sharding_*          docs/semantics.md#9-sharding, in the precedence order of sharding.hpp
//   cp_*                docs/semantics.md#91-context-parallelism, in the precedence order of context_parallel.hpp
//   over_memory_budget  an input whose mask, tensors or outputs would need more memory
//                       than the configured budget (memory_budget.hpp), or whose sizes
//                       overflow int64
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <stdexcept>
#include <variant>

namespace attn_oracle::inline model {

enum class ErrorCode {
  bad_mask,
  bad_window,
  bad_max_segments,
  rank_mismatch,
  shape_mismatch,
  extra_dims_mismatch,
  negative_id,
  noncontiguous_segment,
  too_many_segments,
  ids_out_of_order,
  padding_with_non_padding_mask,
  positions_not_increasing,
  negative_position,
  bad_case,
  bad_heads,
  bad_tensor_shape,
  unsupported,
  small_seq_query_count,
  small_seq_key_count,
  kv_buffer_document_length,
  kv_buffer_micro_seq_tokens,
  kv_buffer_slice_out_of_bounds,
  sharding_bad_mesh,
  sharding_bad_spec,
  sharding_unknown_axis,
  sharding_repeated_axis,
  sharding_spec_mismatch,
  sharding_segment_ids_mismatch,
  sharding_not_divisible,
  sharding_kv_heads_not_divisible,
  over_memory_budget,
  bad_metadata,  // metadata handed to a kernel entry point: a document span outside its tensor
  non_finite_input,  // an input value not finite once rounded to the dtype, or a non-finite scale
  value_overflow,    // magnitudes whose scores or gradients can leave float32's range
  cp_bad_layout,              // context parallelism (context_parallel.hpp): cp < 1, stripe < 1, stray indices
  cp_not_self_attention,      // q and kv sides differ: a layout splits one row's tokens
  cp_heads_not_divisible,     // all_to_all: a head count not a multiple of cp
  cp_not_divisible,           // T not a multiple of the layout's chunk unit
  cp_document_not_divisible,  // head_tail: a document not a multiple of 2*cp
  cp_bad_permutation,         // explicit indices that are not a permutation of [0, T)
};

std::string_view to_string(ErrorCode code);
std::optional<ErrorCode> error_code_from_string(std::string_view name);

struct Error {
  ErrorCode code;
  std::string message;  // names the offending row / token / values
};

// Thrown by Expected::value() on an error: carries the error (a caller that
// was sure of a value learns which code it got instead, not "wrong variant").
struct BadExpectedAccess : std::runtime_error {
  explicit BadExpectedAccess(Error e)
      : std::runtime_error("a value was expected, got " + std::string(to_string(e.code)) + ": " + e.message),
        error(std::move(e)) {}
  Error error;
};

// A value or an Error. Minimal on purpose: std::expected is C++23.
template <class T>
class Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}
  Expected(Error error) : state_(std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return check(), std::get<0>(state_); }
  T& value() & { return check(), std::get<0>(state_); }
  T&& value() && { return check(), std::get<0>(std::move(state_)); }
  const Error& error() const { return std::get<1>(state_); }
  const T* operator->() const { return &value(); }
  const T& operator*() const { return value(); }

 private:
  void check() const {
    if (!ok()) throw BadExpectedAccess(std::get<1>(state_));
  }
  std::variant<T, Error> state_;
};

}  // namespace attn_oracle::model
