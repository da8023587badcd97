// prepare_batch.cpp: host side of the production metadata path: the whole-input
// checks of docs/semantics.md#input-validation-in-precedence-order (written here again, independent
// of the reference validator that judges it) and the strides that address the batch in place.
#include <algorithm>
#include <cstdint>
#include <tuple>

#include "attn_oracle/gpu/mask_rule.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/model/memory_budget.hpp"

namespace attn_oracle::gpu {
namespace {

static_assert(static_cast<int>(ErrorCode::negative_id) == kNegativeId);
static_assert(static_cast<int>(ErrorCode::negative_position) == kNegativePosition);
static_assert(static_cast<int>(MaskKind::padding_causal_bottom_right) == kPaddingCausalBottomRight);

std::string shape_str(const Shape& s) { return shape_to_string(s); }

std::optional<Error> check_side(const char* name, const PackedSide& s) {
  for (const IntArray* a : {&s.segment_ids, &s.segment_pos}) {
    int64_t n = 1;
    for (int64_t d : a->shape) {
      if (d < 0) return Error{ErrorCode::bad_case, std::string(name) + " array has a negative dim in " + shape_str(a->shape)};
      n *= d;
    }
    if (n != static_cast<int64_t>(a->data.size()))
      return Error{ErrorCode::bad_case, std::string(name) + " array of shape " + shape_str(a->shape) + " holds " + std::to_string(a->data.size()) + " values"};
  }
  return std::nullopt;
}

std::optional<Error> check_ranks(const char* name, const PackedSide& s) {
  const size_t ids = s.segment_ids.shape.size(), pos = s.segment_pos.shape.size();
  if (ids < 2 || ids < pos)
    return Error{ErrorCode::rank_mismatch, std::string(name) + " segment_ids " + shape_str(s.segment_ids.shape) + " vs segment_pos " + shape_str(s.segment_pos.shape) + ": ids need >= 2 dims and >= the positions' dims"};
  return std::nullopt;
}

std::optional<Error> check_suffix(const char* name, const PackedSide& s) {
  const Shape &ids = s.segment_ids.shape, &pos = s.segment_pos.shape;
  bool ok = pos.size() >= 2;
  for (size_t k = 1; ok && k <= pos.size(); ++k) ok = pos[pos.size() - k] == ids[ids.size() - k];
  if (!ok)
    return Error{ErrorCode::shape_mismatch, std::string(name) + " segment_pos " + shape_str(pos) + " is not a trailing suffix (>= [B, T]) of segment_ids " + shape_str(ids)};
  return std::nullopt;
}

// The four [rows, M(+1)] outputs, before the row loop that would take hours on a
// broadcast shape of 10^12 rows.
std::optional<Error> check_output_memory(const Shape& extra, int64_t batch, int64_t max_segments) {
  std::vector<int64_t> factors = extra;
  factors.insert(factors.end(), {batch, max_segments < INT64_MAX ? max_segments + 1 : -1, 4,
                                 static_cast<int64_t>(sizeof(int64_t))});
  MemoryNeed need;
  need.add("the 4 seqlens and offsets outputs of [extra, B, M + 1]", factors);
  return need.check("metadata");
}

// Per broadcast extra dim, the stride of this side's rows (0 where it broadcasts).
void set_strides(SideParams& side, const Shape& side_extra, const Shape& extra) {
  int64_t stride = 1;
  const size_t offset = extra.size() - side_extra.size();
  for (size_t k = extra.size(); k-- > 0;) {
    if (k < offset) continue;
    const int64_t dim = side_extra[k - offset];
    side.extra_stride[k] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
}

// numpy broadcasting of the two extra shapes, aligned from the right.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t k = 0; k < n; ++k) {
    const int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1, db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[n - 1 - k] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace

Expected<PreparedBatch> prepare_batch(const PackedBatch& batch) {
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_side(name, *side)) return *e;
  if (batch.max_segments < 1)
    return Error{ErrorCode::bad_max_segments, "max_segments is " + std::to_string(batch.max_segments) + ", must be >= 1"};
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_ranks(name, *side)) return *e;
  for (auto [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}})
    if (auto e = check_suffix(name, *side)) return *e;
  const Shape &qs = batch.q.segment_ids.shape, &ks = batch.kv.segment_ids.shape;
  const Shape q_extra(qs.begin(), qs.end() - 2), kv_extra(ks.begin(), ks.end() - 2);
  if (qs[qs.size() - 2] != ks[ks.size() - 2])
    return Error{ErrorCode::shape_mismatch, "q has B = " + std::to_string(qs[qs.size() - 2]) + " rows but kv has B = " + std::to_string(ks[ks.size() - 2])};
  const auto extra = broadcast(q_extra, kv_extra);
  if (!extra)
    return Error{ErrorCode::extra_dims_mismatch, "q extra dims " + shape_str(q_extra) + " and kv extra dims " + shape_str(kv_extra) + " do not broadcast"};
  if (extra->size() > static_cast<size_t>(kMaxExtraDims))
    return Error{ErrorCode::unsupported, "more than " + std::to_string(kMaxExtraDims) + " extra dims"};

  if (auto e = check_output_memory(*extra, qs[qs.size() - 2], batch.max_segments)) return *e;

  PreparedBatch out;
  out.extra = *extra;
  MetadataParams& p = out.params;
  p.batch = qs[qs.size() - 2];
  p.rows = shape_product(*extra) * p.batch;
  p.max_segments = batch.max_segments;
  p.mask = static_cast<int>(batch.mask);
  p.extra_rank = static_cast<int>(extra->size());
  for (size_t k = 0; k < extra->size(); ++k) p.extra_shape[k] = (*extra)[k];
  for (auto [side, s, side_extra] : {std::tuple{&p.q, &batch.q, &q_extra}, std::tuple{&p.kv, &batch.kv, &kv_extra}}) {
    side->ids = s->segment_ids.data.data();
    side->pos = s->segment_pos.data.data();
    side->len = s->segment_ids.shape.back();
    const Shape& ps = s->segment_pos.shape;
    side->pos_rows = shape_product(Shape(ps.begin(), ps.end() - 1));
    set_strides(*side, *side_extra, *extra);
  }
  return out;
}

}  // namespace attn_oracle::gpu
