// batch_transforms.cpp: see batch_transforms.hpp.
#include "attn_oracle/properties/batch_transforms.hpp"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace attn_oracle::inline properties {
namespace {

// Rows of `a` (shape [..., R, T] flattened to rows) selected by `rows`, new shape `shape`.
IntArray gather_rows(const IntArray& a, const std::vector<int64_t>& rows, Shape shape) {
  const int64_t len = a.shape.back();
  IntArray out(std::move(shape), {});
  for (int64_t r : rows) out.data.insert(out.data.end(), a.data.begin() + r * len, a.data.begin() + (r + 1) * len);
  return out;
}

int64_t rows_of(const IntArray& a) {
  return a.shape.back() == 0 ? shape_product(Shape(a.shape.begin(), a.shape.end() - 1))
                             : shape_product(a.shape) / a.shape.back();
}

PackedSide keep_side_row(const PackedSide& s, int64_t b) {
  PackedSide out;
  for (auto [from, to] : {std::pair{&s.segment_ids, &out.segment_ids}, std::pair{&s.segment_pos, &out.segment_pos}}) {
    const int64_t batch = from->shape[from->shape.size() - 2];
    std::vector<int64_t> rows;
    for (int64_t r = b; r < rows_of(*from); r += batch) rows.push_back(r);
    Shape shape = from->shape;
    shape[shape.size() - 2] = 1;
    *to = gather_rows(*from, rows, shape);
  }
  return out;
}

}  // namespace

PackedBatch keep_row(const PackedBatch& batch, int64_t b) {
  PackedBatch out = batch;
  out.q = keep_side_row(batch.q, b);
  out.kv = keep_side_row(batch.kv, b);
  return out;
}

PackedBatch extra_slice(const PackedBatch& batch, const BatchLayout& layout, int64_t e) {
  PackedBatch out = batch;
  for (auto [from, to, extra] : {std::tuple{&batch.q, &out.q, &layout.q_extra},
                                 std::tuple{&batch.kv, &out.kv, &layout.kv_extra}}) {
    const int64_t len = from->segment_ids.shape.back();
    std::vector<int64_t> id_rows, pos_rows;
    const int64_t pos_count = rows_of(from->segment_pos);
    for (int64_t b = 0; b < layout.batch; ++b) {
      const int64_t r = broadcast_row_index(e * layout.batch + b, layout.extra, *extra, layout.batch);
      id_rows.push_back(r);
      pos_rows.push_back(r % pos_count);
    }
    to->segment_ids = gather_rows(from->segment_ids, id_rows, {layout.batch, len});
    to->segment_pos = gather_rows(from->segment_pos, pos_rows, {layout.batch, len});
  }
  return out;
}

PackedBatch pad_side(const PackedBatch& batch, Side side, const std::vector<int64_t>& leading,
                     int64_t trailing) {
  PackedBatch out = batch;
  const PackedSide& from = side == Side::q ? batch.q : batch.kv;
  PackedSide& to = side == Side::q ? out.q : out.kv;
  const int64_t len = from.segment_ids.shape.back();
  const int64_t most = leading.empty() ? 0 : *std::max_element(leading.begin(), leading.end());
  const int64_t new_len = len + most + trailing;
  for (auto [a, b] : {std::pair{&from.segment_ids, &to.segment_ids}, std::pair{&from.segment_pos, &to.segment_pos}}) {
    const int64_t batch_size = a->shape[a->shape.size() - 2];
    b->shape.back() = new_len;
    b->data.assign(rows_of(*a) * new_len, 0);
    for (int64_t r = 0; r < rows_of(*a); ++r) {
      const int64_t shift = leading.empty() ? 0 : leading[r % batch_size];
      std::copy(a->data.begin() + r * len, a->data.begin() + (r + 1) * len, b->data.begin() + r * new_len + shift);
    }
  }
  return out;
}

MaskKind with_padding(MaskKind kind) {
  switch (kind) {
    case MaskKind::no_mask: return MaskKind::padding;
    case MaskKind::causal: return MaskKind::padding_causal;
    case MaskKind::causal_bottom_right: return MaskKind::padding_causal_bottom_right;
    default: return kind;
  }
}

std::vector<int64_t> row_slice(const std::vector<int64_t>& per_row, int64_t width, int64_t r) {
  return std::vector<int64_t>(per_row.begin() + r * width, per_row.begin() + (r + 1) * width);
}

}  // namespace attn_oracle::properties

namespace attn_oracle::inline properties {
namespace {

struct DocTokens {
  std::vector<int64_t> q, kv;  // row-local token indices
};

// Documents of one row by id, in id order, with their tokens on each side.
std::vector<DocTokens> row_documents(const RowView& q, const RowView& kv) {
  std::vector<std::pair<int64_t, DocTokens>> docs;
  auto doc = [&](int64_t id) -> DocTokens& {
    for (auto& [existing, d] : docs)
      if (existing == id) return d;
    docs.push_back({id, {}});
    return docs.back().second;
  };
  for (int64_t t = 0; t < q.len; ++t)
    if (q.ids[t] > 0) doc(q.ids[t]).q.push_back(t);
  for (int64_t t = 0; t < kv.len; ++t)
    if (kv.ids[t] > 0) doc(kv.ids[t]).kv.push_back(t);
  std::sort(docs.begin(), docs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<DocTokens> out;
  for (auto& d : docs) out.push_back(std::move(d.second));
  return out;
}

void write_side(const std::vector<DocTokens>& docs, bool q, const RowView& from, int64_t row,
                int64_t* ids, int64_t* pos, std::vector<int64_t>& from_index) {
  int64_t t = 0;
  for (size_t k = 0; k < docs.size(); ++k)
    for (int64_t old : q ? docs[k].q : docs[k].kv) {
      ids[t] = static_cast<int64_t>(k) + 1;
      pos[t] = from.pos[old];
      from_index[row * from.len + t] = row * from.len + old;
      ++t;
    }
}

}  // namespace

PackedBatch at_extreme_integers(const PackedBatch& batch, int64_t margin, int64_t left_as, int64_t right_as,
                               int64_t top) {
  PackedBatch b = batch;
  int64_t lowest = INT64_MAX, highest = 0;
  for (const PackedSide* s : {&batch.q, &batch.kv})
    for (int64_t p : s->segment_pos.data) lowest = std::min(lowest, p), highest = std::max(highest, p);
  if (lowest < 0 || highest > top - margin) return b;  // not a valid batch, or already there
  const int64_t shift = top - margin - highest;
  for (PackedSide* s : {&b.q, &b.kv})
    for (int64_t& p : s->segment_pos.data) p += shift;
  // Past this, a window side allows every pair a bounded one could (a run is
  // at most the longest side; the bottom-right term adds one run length).
  const int64_t longest = std::max(batch.q.segment_ids.shape.back(), batch.kv.segment_ids.shape.back());
  const int64_t wide_enough = (lowest <= highest ? highest - lowest : 0) + longest + 1;
  auto replaced = [&](int64_t side, int64_t as) {
    if (as < 0) return side < 0 ? as : side;
    return side < 0 || side >= wide_enough ? std::max(as, wide_enough) : side;
  };
  b.window = Window{replaced(batch.window.left, left_as), replaced(batch.window.right, right_as)};
  return b;
}

PermutedBatch permute_documents(const PackedBatch& batch, uint64_t order_seed) {
  // Unbatched inputs only (no extra dims): the attention properties draw those.
  BatchLayout l;
  l.batch = batch.q.segment_ids.shape[0];
  l.q_len = batch.q.segment_ids.shape[1];
  l.kv_len = batch.kv.segment_ids.shape[1];
  PermutedBatch out{batch, std::vector<int64_t>(l.batch * l.q_len, -1), std::vector<int64_t>(l.batch * l.kv_len, -1)};
  for (PackedSide* s : {&out.batch.q, &out.batch.kv}) {
    s->segment_ids.data.assign(s->segment_ids.data.size(), 0);
    s->segment_pos = IntArray::filled(s->segment_ids.shape, 0);
  }
  for (int64_t r = 0; r < l.batch; ++r) {
    const RowView q = side_row(batch.q, {}, l, r), kv = side_row(batch.kv, {}, l, r);
    std::vector<DocTokens> docs = row_documents(q, kv);
    std::reverse(docs.begin(), docs.end());
    for (uint64_t k = 1, x = order_seed; k < docs.size() && order_seed != 0; ++k, x /= 7)
      std::swap(docs[k], docs[x % (k + 1)]);
    write_side(docs, true, q, r, out.batch.q.segment_ids.data.data() + r * l.q_len,
               out.batch.q.segment_pos.data.data() + r * l.q_len, out.q_from);
    write_side(docs, false, kv, r, out.batch.kv.segment_ids.data.data() + r * l.kv_len,
               out.batch.kv.segment_pos.data.data() + r * l.kv_len, out.kv_from);
  }
  return out;
}

std::vector<double> gather_tokens(const std::vector<double>& in, const std::vector<int64_t>& from,
                                  int64_t width) {
  std::vector<double> out(from.size() * width, 0.0);
  for (size_t t = 0; t < from.size(); ++t)
    if (from[t] >= 0) std::copy_n(in.begin() + from[t] * width, width, out.begin() + t * width);
  return out;
}

}  // namespace attn_oracle::properties
