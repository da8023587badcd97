// packed_batch.hpp: the input data model of docs/semantics.md#1-inputs.
//
// A packed batch is two sides (q and kv), each with integer segment ids of shape
// [..., B, T] and positions whose shape is a trailing suffix of the ids' shape
// (broadcast over the missing leading dims). Arrays are row-major and hold
// int64 so that out-of-range values from a case file survive until validation
// names them. Nothing here validates: see validate.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn_oracle::inline model {

using Shape = std::vector<int64_t>;

int64_t shape_product(const Shape& shape);  // 1 for the empty shape
std::string shape_to_string(const Shape& shape);

// A dense row-major integer array.
struct IntArray {
  Shape shape;
  std::vector<int64_t> data;

  IntArray() = default;
  IntArray(Shape s, std::vector<int64_t> d) : shape(std::move(s)), data(std::move(d)) {}
  static IntArray filled(Shape s, int64_t value);
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool operator==(const IntArray&) const = default;
};

enum class MaskKind {
  no_mask,
  padding,
  causal,
  padding_causal,
  causal_bottom_right,
  padding_causal_bottom_right,
};
inline constexpr MaskKind kAllMaskKinds[] = {
    MaskKind::no_mask,        MaskKind::padding,
    MaskKind::causal,         MaskKind::padding_causal,
    MaskKind::causal_bottom_right, MaskKind::padding_causal_bottom_right};

std::string_view to_string(MaskKind kind);
std::optional<MaskKind> mask_kind_from_string(std::string_view name);
bool allows_padding(MaskKind kind);    // padding, padding_causal, padding_causal_bottom_right
bool is_causal(MaskKind kind);         // any causal kind
bool is_bottom_right(MaskKind kind);   // *_bottom_right

// Sliding window; a negative side is unbounded. Bottom-right kinds ignore `right`.
struct Window {
  int64_t left = -1;
  int64_t right = -1;
  bool operator==(const Window&) const = default;
};

struct PackedSide {
  IntArray segment_ids;  // [..., B, T]; 0 = padding, else the document's slot 1..M
  IntArray segment_pos;  // trailing suffix of segment_ids.shape, >= 0
  bool operator==(const PackedSide&) const = default;
};

struct PackedBatch {
  PackedSide q;
  PackedSide kv;
  MaskKind mask = MaskKind::padding;
  Window window;
  int64_t max_segments = 1;  // M
  bool operator==(const PackedBatch&) const = default;
};

// The shape bookkeeping of a *validated* batch: broadcast extra dims, rows, T.
// Flat row r runs over broadcast_extra x B in row-major order.
struct BatchLayout {
  Shape q_extra, kv_extra, extra;  // extra = broadcast(q_extra, kv_extra)
  int64_t batch = 0;               // B
  int64_t q_len = 0, kv_len = 0;   // T of each side
  int64_t max_segments = 0;        // M
  int64_t rows() const { return shape_product(extra) * batch; }
};

// Broadcast of two extra shapes under numpy rules; nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Flat index into an array of shape `from_extra` x B for broadcast row `row` of
// `to_extra` x B: dims of size 1 (or missing) in `from_extra` repeat.
int64_t broadcast_row_index(int64_t row, const Shape& to_extra, const Shape& from_extra,
                            int64_t batch);

// A read-only view of one side of one broadcast row: ids[t], pos[t] for t < len.
struct RowView {
  const int64_t* ids = nullptr;
  const int64_t* pos = nullptr;
  int64_t len = 0;
};

// The q (or kv) row that broadcast row `row` reads, positions broadcast too.
RowView side_row(const PackedSide& side, const Shape& side_extra, const BatchLayout& layout,
                 int64_t row);

}  // namespace attn_oracle::model
