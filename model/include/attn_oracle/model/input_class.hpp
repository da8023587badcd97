// input_class.hpp: the degenerate input classes of a packed batch. These are
// inputs that are valid (the reference answers them) but that many stacks do not
// take: a side with no tokens, vmapped extra leading dims, integers past int32.
// A backend's failures on them are usually one decision, not a bug each, and they
// hide the wrong answers on ordinary inputs that matter. Failure triage clusters
// by them (runner/include/attn_oracle/runner/triage.hpp), and a backend declines one
// with a single line in its `unsupported` hook:
//
//   if (in_input_class(batch, InputClass::extra_dims)) return "vmapped extra dims";
#pragma once

#include <string_view>
#include <vector>

#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline model {

enum class InputClass {
  empty_side,  // a row of a side has no token that is not padding (T = 0 included)
  extra_dims,  // ids or positions with extra leading (vmapped) dims
  int_limits,  // a position, M or a window bound past INT32_MAX
};
inline constexpr InputClass kInputClasses[] = {InputClass::empty_side, InputClass::extra_dims, InputClass::int_limits};

// "a side with no tokens", "vmapped extra dims", "values past int32".
std::string_view to_string(InputClass c);
// "empty_side", "extra_dims", "int_limits": the enumerator, for a line of C++ that names it.
std::string_view enumerator_name(InputClass c);

// Any batch, valid or not: only shapes and values are read.
bool in_input_class(const PackedBatch& batch, InputClass c);
// Those the batch is in, in kInputClasses order; empty for an ordinary batch.
std::vector<InputClass> input_classes(const PackedBatch& batch);

}  // namespace attn_oracle::model
