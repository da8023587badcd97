// packed_batch.cpp: shape arithmetic and broadcasting for the packed-batch model.
#include "attn_oracle/model/packed_batch.hpp"

#include <array>
#include <sstream>

namespace attn_oracle::inline model {

int64_t shape_product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

IntArray IntArray::filled(Shape s, int64_t value) {
  const int64_t n = shape_product(s);
  return IntArray(std::move(s), std::vector<int64_t>(static_cast<size_t>(n), value));
}

namespace {
constexpr std::array<std::string_view, 6> kMaskNames = {
    "no_mask", "padding", "causal", "padding_causal", "causal_bottom_right",
    "padding_causal_bottom_right"};
}

std::string_view to_string(MaskKind kind) { return kMaskNames[static_cast<size_t>(kind)]; }

std::optional<MaskKind> mask_kind_from_string(std::string_view name) {
  for (size_t i = 0; i < kMaskNames.size(); ++i)
    if (kMaskNames[i] == name) return static_cast<MaskKind>(i);
  return std::nullopt;
}

bool allows_padding(MaskKind kind) {
  return kind == MaskKind::padding || kind == MaskKind::padding_causal ||
         kind == MaskKind::padding_causal_bottom_right;
}
bool is_bottom_right(MaskKind kind) {
  return kind == MaskKind::causal_bottom_right || kind == MaskKind::padding_causal_bottom_right;
}
bool is_causal(MaskKind kind) {
  return kind == MaskKind::causal || kind == MaskKind::padding_causal || is_bottom_right(kind);
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right, as numpy does.
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t broadcast_row_index(int64_t row, const Shape& to_extra, const Shape& from_extra,
                            int64_t batch) {
  const int64_t b = row % batch;
  int64_t rest = row / batch;
  // Walk the broadcast extra dims from the innermost, building the source index.
  int64_t from_index = 0, from_stride = 1;
  const size_t offset = to_extra.size() - from_extra.size();
  for (size_t k = to_extra.size(); k-- > 0;) {
    const int64_t coord = rest % to_extra[k];
    rest /= to_extra[k];
    if (k < offset) continue;
    const int64_t from_dim = from_extra[k - offset];
    from_index += (from_dim == 1 ? 0 : coord) * from_stride;
    from_stride *= from_dim;
  }
  return from_index * batch + b;
}

RowView side_row(const PackedSide& side, const Shape& side_extra, const BatchLayout& layout,
                 int64_t row) {
  const int64_t len = side.segment_ids.shape.back();
  const int64_t side_row_index = broadcast_row_index(row, layout.extra, side_extra, layout.batch);
  // Positions are a trailing suffix of the ids' shape: their rows repeat.
  int64_t pos_rows = 1;
  for (size_t k = 0; k + 1 < side.segment_pos.shape.size(); ++k) pos_rows *= side.segment_pos.shape[k];
  const int64_t pos_row_index = pos_rows == 0 ? 0 : side_row_index % pos_rows;
  return RowView{side.segment_ids.data.data() + side_row_index * len,
                 side.segment_pos.data.data() + pos_row_index * len, len};
}

}  // namespace attn_oracle::model
