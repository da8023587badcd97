// metadata_difference.cpp: see metadata_difference.hpp.
#include "attn_oracle/properties/metadata_difference.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

namespace attn_oracle::inline properties {
namespace {

// Flat entry i of a per-slot field [..., B, width] as its index into that shape
// and what it is: "[1, 0] (row 1, slot 0)", "[2, 1, 0] (slice 2, row 1, slot 0)".
std::string slot_index(const Metadata& md, int64_t width, int64_t i) {
  const int64_t slot = i % width, row = i / width % md.batch, slice = i / width / md.batch;
  std::vector<int64_t> index(md.extra.size());
  for (int64_t d = static_cast<int64_t>(index.size()) - 1, rest = slice; d >= 0; --d)
    index[d] = rest % md.extra[d], rest /= md.extra[d];
  std::string out = "[";
  for (int64_t e : index) out += std::to_string(e) + ", ";
  out += std::to_string(row) + ", " + std::to_string(slot) + "] (";
  if (!md.extra.empty()) out += "slice " + std::to_string(slice) + ", ";
  return out + "row " + std::to_string(row) + ", slot " + std::to_string(slot) + ")";
}

}  // namespace

std::string first_difference(const Metadata& got, const Metadata& want) {
  if (got.extra != want.extra || got.batch != want.batch || got.max_segments != want.max_segments)
    return "shapes differ: extra " + shape_to_string(got.extra) + " vs " + shape_to_string(want.extra);
  const int64_t M = want.max_segments;
  struct Field {
    const char* name;
    const std::vector<int64_t>*got, *want;
    int64_t slots;  // per row; 0 for a compacted field
  };
  const Field fields[] = {{"q_seqlens", &got.q_seqlens, &want.q_seqlens, M},
                          {"kv_seqlens", &got.kv_seqlens, &want.kv_seqlens, M},
                          {"q_offsets", &got.q_offsets, &want.q_offsets, M + 1},
                          {"kv_offsets", &got.kv_offsets, &want.kv_offsets, M + 1},
                          {"cu_seqlens_q", &got.cu_seqlens_q, &want.cu_seqlens_q, 0},
                          {"cu_seqlens_kv", &got.cu_seqlens_kv, &want.cu_seqlens_kv, 0},
                          {"ragged_offsets_q", &got.ragged_offsets_q, &want.ragged_offsets_q, 0},
                          {"ragged_offsets_kv", &got.ragged_offsets_kv, &want.ragged_offsets_kv, 0}};
  for (const auto& [name, a, b, slots] : fields) {
    for (size_t i = 0; i < std::max(a->size(), b->size()); ++i) {
      if (i < a->size() && i < b->size() && (*a)[i] == (*b)[i]) continue;
      const bool in_shape = slots > 0 && want.batch > 0 && static_cast<int64_t>(i) < static_cast<int64_t>(b->size());
      std::ostringstream os;
      os << name << (in_shape ? slot_index(want, slots, static_cast<int64_t>(i)) : "[" + std::to_string(i) + "]")
         << ": backend " << (i < a->size() ? std::to_string((*a)[i]) : "missing") << ", expected "
         << (i < b->size() ? std::to_string((*b)[i]) : "missing");
      return os.str();
    }
  }
  for (const auto& [name, a, b] : returned_optional_fields(got, want)) {
    if (a == b) continue;
    const bool scalar = b.size() == 1 && name[0] == 'm';
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    const auto at = [&](const std::vector<int64_t>& v) { return i < v.size() ? std::to_string(v[i]) : "missing"; };
    return std::string(name) + (scalar ? "" : "[" + std::to_string(i) + "]") + ": backend " + at(a) + ", expected " +
           at(b);
  }
  return "";
}

}  // namespace attn_oracle::properties
