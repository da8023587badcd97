// input_class.cpp: input_class.hpp.
#include "attn_oracle/model/input_class.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace attn_oracle::inline model {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Rows of the ids' shape: every leading dim, T the last.
bool side_has_empty_row(const IntArray& ids) {
  if (ids.shape.empty()) return false;
  const int64_t t = ids.shape.back();
  if (t == 0) return true;
  for (size_t row = 0; row * t < ids.data.size(); ++row)
    if (std::all_of(ids.data.begin() + row * t, ids.data.begin() + (row + 1) * t, [](int64_t id) { return id == 0; }))
      return true;
  return false;
}

bool past_int32(const IntArray& a) {
  return std::any_of(a.data.begin(), a.data.end(), [](int64_t v) { return v > kInt32Max || v < -kInt32Max - 1; });
}

}  // namespace

// Each class's words and enumerator, in kInputClasses order.
struct ClassNames {
  std::string_view text, enumerator;
};
constexpr ClassNames kNames[] = {{"a side with no tokens", "empty_side"},
                                 {"vmapped extra dims", "extra_dims"},
                                 {"values past int32", "int_limits"}};

std::string_view to_string(InputClass c) { return kNames[static_cast<int>(c)].text; }
std::string_view enumerator_name(InputClass c) { return kNames[static_cast<int>(c)].enumerator; }

bool in_input_class(const PackedBatch& b, InputClass c) {
  switch (c) {
    case InputClass::empty_side: return side_has_empty_row(b.q.segment_ids) || side_has_empty_row(b.kv.segment_ids);
    case InputClass::extra_dims: return b.q.segment_ids.rank() > 2 || b.kv.segment_ids.rank() > 2;
    case InputClass::int_limits:
      return past_int32(b.q.segment_pos) || past_int32(b.kv.segment_pos) || past_int32(b.q.segment_ids) ||
             past_int32(b.kv.segment_ids) || b.max_segments > kInt32Max || b.window.left > kInt32Max ||
             b.window.right > kInt32Max;
  }
  return false;
}

std::vector<InputClass> input_classes(const PackedBatch& batch) {
  std::vector<InputClass> out;
  for (InputClass c : kInputClasses)
    if (in_input_class(batch, c)) out.push_back(c);
  return out;
}

}  // namespace attn_oracle::model
