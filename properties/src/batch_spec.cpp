// batch_spec.cpp: the spec -> batch builder (batch_spec.hpp): the ids and
// positions of a drawn spec, and the cut that keeps a kernel-tile spec inside
// its budget. Nothing here draws; the draws that fill a spec are in
// document_generators.cpp and packed_batch_generators.cpp.
//
// Checked by tests/generators_test.cpp: every valid draw passes validation.
#include "batch_spec.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace attn_oracle::inline properties {
namespace {

// The highest M spare capacity reaches (build_batch).
constexpr int64_t kMaxSegments = 6;

struct Token {
  int64_t id = 0, pos = 0;
};

int64_t doc_len(const DocSpec& d, bool q) { return q ? d.q_len : d.kv_len; }

// One side of one row from its documents; positions follow the side's mode.
std::vector<Token> build_row(const std::vector<DocSpec>& docs, const SideSpec& side, bool q,
                             bool padding) {
  std::vector<Token> row;
  int64_t id = 0;
  for (const DocSpec& d : docs) {
    id += std::max(1, d.id_step);
    const int64_t len = doc_len(d, q);
    if (len == 0) continue;
    if (padding) row.insert(row.end(), q ? d.q_gap : d.kv_gap, Token{0, 0});
    const int64_t start = side.mode == PositionMode::contiguous ? 0 : (q ? d.q_start : d.kv_start);
    const int64_t stride = side.mode == PositionMode::striped ? side.stride : 1;
    for (int64_t i = 0; i < len; ++i) row.push_back(Token{id, start + stride * i});
  }
  return row;
}

int64_t highest_id(const std::vector<DocSpec>& docs) {
  int64_t id = 0;
  for (const DocSpec& d : docs) id += std::max(1, d.id_step);
  return id;
}

// Non-padding kinds: a short row grows its last document (or gains one).
void fill_row(std::vector<Token>& row, int64_t len, bool padding, int64_t next_id,
              const SideSpec& side) {
  if (padding) {
    row.resize(len, Token{0, 0});
    return;
  }
  if (row.empty() && len > 0) row.push_back(Token{next_id, 0});
  const int64_t stride = side.mode == PositionMode::striped ? side.stride : 1;
  while (static_cast<int64_t>(row.size()) < len) row.push_back(Token{row.back().id, row.back().pos + stride});
}

// Index of the broadcast slice that side slice `s` (over `side_extra`) reads from.
int64_t slice_for(int64_t s, const Shape& side_extra, const Shape& extra) {
  Shape coord(extra.size(), 0);
  for (size_t k = side_extra.size(); k-- > 0;) {
    coord[k + extra.size() - side_extra.size()] = s % side_extra[k];
    s /= side_extra[k];
  }
  int64_t flat = 0;
  for (size_t k = 0; k < extra.size(); ++k) flat = flat * extra[k] + coord[k];
  return flat;
}

PackedSide build_side(const BatchSpec& spec, const SideSpec& side, bool q, const Shape& extra,
                      int64_t* max_id) {
  const bool padding = allows_padding(spec.mask) && !spec.no_padding;
  const int64_t batch = spec.slices.front().size();
  const int64_t side_slices = shape_product(side.extra);
  std::vector<std::vector<Token>> rows;
  std::vector<int64_t> next_ids;
  int64_t len = 0;
  for (int64_t s = 0; s < side_slices; ++s) {
    const auto& slice = spec.slices[slice_for(s, side.extra, extra)];
    for (int64_t b = 0; b < batch; ++b) {
      rows.push_back(build_row(slice[b], side, q, padding));
      const int64_t next = highest_id(slice[b]) + 1;
      next_ids.push_back(spec.id_cap > 0 ? std::min(next, spec.id_cap) : next);
      len = std::max<int64_t>(len, rows.back().size());
    }
  }
  if (padding) len += q ? spec.q_trailing : spec.kv_trailing;
  PackedSide out;
  Shape shape = side.extra;
  shape.push_back(batch);
  shape.push_back(len);
  out.segment_ids = IntArray::filled(shape, 0);
  out.segment_pos = IntArray::filled(shape, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    fill_row(rows[r], len, padding, next_ids[r], side);
    for (int64_t t = 0; t < len; ++t) {
      out.segment_ids.data[r * len + t] = rows[r][t].id;
      out.segment_pos.data[r * len + t] = rows[r][t].pos;
      *max_id = std::max(*max_id, rows[r][t].id);
    }
  }
  if (side.broadcast_pos && !side.extra.empty()) {
    // Positions shared by every slice must increase along the whole row.
    const int64_t stride = side.mode == PositionMode::striped ? side.stride : 1;
    out.segment_pos = IntArray::filled({batch, len}, 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < len; ++t) out.segment_pos.data[b * len + t] = stride * t + b;
  }
  return out;
}

// The longest row of one side of a spec in tokens: documents, their gaps and
// the trailing padding (padding kinds), as build_batch lays it out.
int64_t side_tokens(const BatchSpec& spec, bool q) {
  const bool padding = allows_padding(spec.mask) && !spec.no_padding;
  int64_t longest = 0;
  for (const auto& slice : spec.slices)
    for (const auto& row : slice) {
      int64_t t = 0;
      for (const DocSpec& d : row) t += (q ? d.q_len : d.kv_len) + (padding ? (q ? d.q_gap : d.kv_gap) : 0);
      longest = std::max(longest, t);
    }
  return longest + (padding ? (q ? spec.q_trailing : spec.kv_trailing) : 0);
}

int64_t spec_rows(const BatchSpec& spec) {
  return spec.slices.empty() ? 0 : static_cast<int64_t>(spec.slices.size() * spec.slices.front().size());
}

}  // namespace

PackedBatch build_batch(const BatchSpec& spec) {
  const Shape extra = broadcast_shapes(spec.q.extra, spec.kv.extra).value_or(Shape{});
  PackedBatch batch;
  batch.mask = spec.mask;
  batch.window = spec.window;
  int64_t max_id = 0;
  batch.q = build_side(spec, spec.q, true, extra, &max_id);
  batch.kv = build_side(spec, spec.kv, false, extra, &max_id);
  // Spare capacity never takes M past kMaxSegments (6); a filler document may need the last id.
  batch.max_segments = std::max<int64_t>({1, max_id, std::min<int64_t>(max_id + spec.spare_capacity, kMaxSegments)});
  return batch;
}

BatchSpec cap_kernel_tile_sizes(BatchSpec spec, bool q_is_kv) {
  if (spec.max_pairs <= 0) return spec;
  if (spec.max_row_tokens > 0)
    for (auto [side, trailing] : {std::pair{true, &spec.q_trailing}, std::pair{false, &spec.kv_trailing}}) {
      const int64_t over = side_tokens(spec, side) - spec.max_row_tokens;
      if (over > 0) *trailing = static_cast<int>(std::max<int64_t>(0, *trailing - over));
    }
  int64_t docs = 0;
  for (const auto& slice : spec.slices)
    for (const auto& row : slice) docs += static_cast<int64_t>(row.size());
  const int64_t share = std::max<int64_t>(1, spec.max_pairs / std::max<int64_t>(docs, 1));
  std::vector<DocSpec*> all;
  for (auto& slice : spec.slices)
    for (auto& row : slice)
      for (DocSpec& d : row) all.push_back(&d);
  for (DocSpec* d : all) {
    if (int64_t{d->q_len} * d->kv_len <= share) continue;
    if (q_is_kv) d->q_len = d->kv_len = std::min(d->q_len, std::max(1, static_cast<int>(std::sqrt(double(share)))));
    else d->q_len = static_cast<int>(std::max<int64_t>(1, share / std::max(1, d->kv_len)));
  }
  auto cells = [&] { return spec_rows(spec) * side_tokens(spec, true) * side_tokens(spec, false); };
  if (spec.max_cells <= 0 || cells() <= spec.max_cells) return spec;
  for (DocSpec* d : all) d->q_gap = 0, d->kv_gap = q_is_kv ? 0 : d->kv_gap;
  spec.q_trailing = 0;
  if (q_is_kv) spec.kv_trailing = 0;
  while (cells() > spec.max_cells) {
    DocSpec* longest = nullptr;
    for (DocSpec* d : all)
      if (!longest || d->q_len > longest->q_len) longest = d;
    if (!longest || longest->q_len <= 1) break;
    longest->q_len /= 2;
    if (q_is_kv) longest->kv_len = longest->q_len;
  }
  return spec;
}

}  // namespace attn_oracle::properties
