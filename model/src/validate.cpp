// validate.cpp: docs/semantics.md#input-validation-in-precedence-order checks, in precedence order.
#include "attn_oracle/model/validate.hpp"

#include <cstdint>
#include <map>
#include <sstream>

#include "attn_oracle/model/memory_budget.hpp"

namespace attn_oracle::inline model {
namespace {

Error make_error(ErrorCode code, const std::string& message) { return Error{code, message}; }

// "q side, row 3" or "q side, row 3 (index [1, 0])" when there are extra dims.
std::string row_name(const char* side, const Shape& side_extra, int64_t batch, int64_t side_row) {
  std::ostringstream os;
  os << side << " side, row " << side_row;
  if (!side_extra.empty()) {
    Shape index(side_extra.size() + 1);
    int64_t rest = side_row;
    index.back() = rest % batch;
    rest /= batch;
    for (size_t k = side_extra.size(); k-- > 0;) {
      index[k] = rest % side_extra[k];
      rest /= side_extra[k];
    }
    os << " (index " << shape_to_string(index) << ")";
  }
  return os.str();
}

std::optional<Error> check_side_shapes_rank(const char* side, const PackedSide& s) {
  if (s.segment_ids.rank() < 2 || s.segment_ids.rank() < s.segment_pos.rank())
    return make_error(ErrorCode::rank_mismatch,
                      std::string(side) + " segment_ids have shape " +
                          shape_to_string(s.segment_ids.shape) + " and segment_pos " +
                          shape_to_string(s.segment_pos.shape) +
                          ": ids need at least 2 dims and at least as many as positions");
  return std::nullopt;
}

std::optional<Error> check_side_shapes_suffix(const char* side, const PackedSide& s) {
  const Shape& ids = s.segment_ids.shape;
  const Shape& pos = s.segment_pos.shape;
  bool suffix = pos.size() >= 2;
  for (size_t k = 0; suffix && k < pos.size(); ++k)
    suffix = pos[pos.size() - 1 - k] == ids[ids.size() - 1 - k];
  if (!suffix)
    return make_error(ErrorCode::shape_mismatch,
                      std::string(side) + " segment_pos shape " + shape_to_string(pos) +
                          " is not a trailing suffix (of at least [B, T]) of segment_ids shape " +
                          shape_to_string(ids));
  return std::nullopt;
}

std::optional<Error> check_data_sizes(const char* side, const PackedSide& s) {
  for (const IntArray* a : {&s.segment_ids, &s.segment_pos}) {
    for (int64_t d : a->shape)
      if (d < 0)
        return make_error(ErrorCode::bad_case, std::string(side) + " array has a negative dim in " +
                                                   shape_to_string(a->shape));
    if (static_cast<int64_t>(a->data.size()) != shape_product(a->shape))
      return make_error(ErrorCode::bad_case,
                        std::string(side) + " array of shape " + shape_to_string(a->shape) +
                            " holds " + std::to_string(a->data.size()) + " values");
  }
  return std::nullopt;
}

Shape extra_of(const PackedSide& s) {
  return Shape(s.segment_ids.shape.begin(), s.segment_ids.shape.end() - 2);
}

// One side of one row, docs/semantics.md#input-validation-in-precedence-order per-row codes in
// precedence order.
std::optional<Error> check_row(const RowView& row, MaskKind mask, int64_t max_segments,
                               const std::string& where) {
  auto fail = [&](ErrorCode code, int64_t t, const std::string& what) {
    return make_error(code, where + ", token " + std::to_string(t) + ": " + what);
  };
  for (int64_t t = 0; t < row.len; ++t)
    if (row.ids[t] < 0) return fail(ErrorCode::negative_id, t, "id " + std::to_string(row.ids[t]) + " is negative");

  std::map<int64_t, int64_t> last_seen;  // id -> last token index holding it
  for (int64_t t = 0; t < row.len; ++t) {
    const int64_t id = row.ids[t];
    if (id != 0) {
      auto it = last_seen.find(id);
      if (it != last_seen.end() && it->second != t - 1)
        return fail(ErrorCode::noncontiguous_segment, t,
                    "id " + std::to_string(id) + " reappears after id " +
                        std::to_string(row.ids[t - 1]) + " (its run ended at token " +
                        std::to_string(it->second) + ")");
      last_seen[id] = t;
    }
  }
  for (int64_t t = 0; t < row.len; ++t)
    if (row.ids[t] > max_segments)
      return fail(ErrorCode::too_many_segments, t,
                  "id " + std::to_string(row.ids[t]) + " exceeds max_segments " +
                      std::to_string(max_segments));
  int64_t previous_doc = 0;
  for (int64_t t = 0; t < row.len; ++t) {
    const int64_t id = row.ids[t];
    const bool starts_document = id != 0 && (t == 0 || row.ids[t - 1] != id);
    if (!starts_document) continue;
    if (id <= previous_doc)
      return fail(ErrorCode::ids_out_of_order, t,
                  "document id " + std::to_string(id) + " follows document id " +
                      std::to_string(previous_doc));
    previous_doc = id;
  }
  if (!allows_padding(mask))
    for (int64_t t = 0; t < row.len; ++t)
      if (row.ids[t] == 0)
        return fail(ErrorCode::padding_with_non_padding_mask, t,
                    "padding (id 0) under mask " + std::string(to_string(mask)));
  for (int64_t t = 1; t < row.len; ++t)
    if (row.ids[t] != 0 && row.ids[t] == row.ids[t - 1] && row.pos[t] <= row.pos[t - 1])
      return fail(ErrorCode::positions_not_increasing, t,
                  "position " + std::to_string(row.pos[t]) + " does not exceed position " +
                      std::to_string(row.pos[t - 1]) + " of the previous token of document " +
                      std::to_string(row.ids[t]));
  for (int64_t t = 0; t < row.len; ++t)
    if (row.ids[t] != 0 && row.pos[t] < 0)
      return fail(ErrorCode::negative_position, t,
                  "position " + std::to_string(row.pos[t]) + " of document " +
                      std::to_string(row.ids[t]) + " is negative");
  return std::nullopt;
}

// The four [rows, M(+1)] metadata outputs every backend returns.
std::optional<Error> check_metadata_outputs(const BatchLayout& l) {
  std::vector<int64_t> factors = l.extra;
  const int64_t m_plus_one = l.max_segments < INT64_MAX ? l.max_segments + 1 : -1;
  factors.insert(factors.end(), {l.batch, m_plus_one, 4, static_cast<int64_t>(sizeof(int64_t))});
  MemoryNeed need;
  need.add("the 4 seqlens and offsets outputs of [extra " + shape_to_string(l.extra) + ", B " +
               std::to_string(l.batch) + ", M + 1 " +
               (m_plus_one > 0 ? std::to_string(m_plus_one) : "2^63") + "]",
           factors);
  return need.check("metadata");
}

}  // namespace

Expected<BatchLayout> validate_shapes(const PackedBatch& batch) {
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_data_sizes(name, *side)) return *e;
  if (batch.max_segments < 1)
    return make_error(ErrorCode::bad_max_segments,
                      "max_segments is " + std::to_string(batch.max_segments) + ", must be >= 1");
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_side_shapes_rank(name, *side)) return *e;
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_side_shapes_suffix(name, *side)) return *e;

  BatchLayout layout;
  layout.q_extra = extra_of(batch.q);
  layout.kv_extra = extra_of(batch.kv);
  const int64_t q_batch = batch.q.segment_ids.shape[layout.q_extra.size()];
  const int64_t kv_batch = batch.kv.segment_ids.shape[layout.kv_extra.size()];
  if (q_batch != kv_batch)
    return make_error(ErrorCode::shape_mismatch, "q has B = " + std::to_string(q_batch) +
                                                     " rows but kv has B = " +
                                                     std::to_string(kv_batch));
  auto extra = broadcast_shapes(layout.q_extra, layout.kv_extra);
  if (!extra)
    return make_error(ErrorCode::extra_dims_mismatch,
                      "q extra dims " + shape_to_string(layout.q_extra) + " and kv extra dims " +
                          shape_to_string(layout.kv_extra) + " do not broadcast");
  layout.extra = *extra;
  layout.batch = q_batch;
  layout.q_len = batch.q.segment_ids.shape.back();
  layout.kv_len = batch.kv.segment_ids.shape.back();
  layout.max_segments = batch.max_segments;
  // Before the per-row checks: a broadcast shape of 10^12 rows would otherwise
  // be validated row by row for hours before anything is allocated.
  if (auto e = check_metadata_outputs(layout)) return *e;
  return layout;
}

Expected<BatchLayout> validate(const PackedBatch& batch) {
  auto layout = validate_shapes(batch);
  if (!layout) return layout;
  const BatchLayout& l = layout.value();
  for (int64_t r = 0; r < l.rows(); ++r) {
    const int64_t q_row = broadcast_row_index(r, l.extra, l.q_extra, l.batch);
    const int64_t kv_row = broadcast_row_index(r, l.extra, l.kv_extra, l.batch);
    if (auto e = check_row(side_row(batch.q, l.q_extra, l, r), batch.mask, batch.max_segments,
                           row_name("q", l.q_extra, l.batch, q_row)))
      return *e;
    if (auto e = check_row(side_row(batch.kv, l.kv_extra, l, r), batch.mask, batch.max_segments,
                           row_name("kv", l.kv_extra, l.batch, kv_row)))
      return *e;
  }
  return layout;
}

}  // namespace attn_oracle::model
