// arbitrary_generators.cpp: small unstructured batches for the precedence of
// error codes (docs/semantics.md#input-validation-in-precedence-order). Ids in -1..4, positions
// near the token index, M in 0..4, extra dims that may or may not broadcast, positions either full
// shape or a [B, T] suffix. About a third of the draws are valid. The ranges
// are tiny so that several violations often meet in one input: valid or not,
// the backend must give exactly the reference's answer, precedence included.
// Inside a domain's shape fields (input_domain.hpp): its mask kinds, rows and
// extra dims, positions from 0 where it asks, q copied to kv for self-attention.
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

rc::Gen<Shape> extra_dims(bool enabled) {
  if (!enabled) return rc::gen::just(Shape{});
  return shrinking_weighted<Shape>({{4, rc::gen::just(Shape{})},
                                        {2, rc::gen::container<Shape>(1, rc::gen::inRange<int64_t>(1, 4))},
                                        {1, rc::gen::container<Shape>(2, rc::gen::inRange<int64_t>(1, 3))}});
}

// Ids: runs of one value, so that documents and violations both appear.
rc::Gen<std::vector<int64_t>> ids_of(int64_t n) {
  auto id = shrinking_weighted<int64_t>({{40, rc::gen::inRange<int64_t>(0, 5)}, {1, rc::gen::just<int64_t>(-1)}});
  auto run = rc::gen::pair(id, rc::gen::inRange(1, 4));
  return rc::gen::map(rc::gen::container<std::vector<std::pair<int64_t, int>>>(n, run), [n](const auto& runs) {
    std::vector<int64_t> ids;
    for (const auto& [id, len] : runs)
      for (int k = 0; k < len && static_cast<int64_t>(ids.size()) < n; ++k) ids.push_back(id);
    return ids;
  });
}

// Positions: the token index within the row, occasionally nudged down.
rc::Gen<std::vector<int64_t>> positions_of(int64_t n, int64_t len) {
  return rc::gen::map(rc::gen::container<std::vector<int>>(n, shrinking_weighted<int>({{8, rc::gen::just(0)}, {1, rc::gen::inRange(1, 4)}})),
                      [len](const std::vector<int>& nudge) {
                        std::vector<int64_t> pos(nudge.size());
                        for (size_t i = 0; i < nudge.size(); ++i) pos[i] = int64_t(i % std::max<int64_t>(1, len)) - nudge[i];
                        return pos;
                      });
}

constexpr int64_t kMaxRows = 3, kMaxLen = 8;

// A side drawn at the largest shape [extra..., kMaxRows, kMaxLen]; `cut` trims
// it. Positions [kMaxRows, kMaxLen] unless `positions_extra` lets them be full.
rc::Gen<PackedSide> full_side(bool extra, bool positions_extra) {
  return rc::gen::mapcat(rc::gen::pair(extra_dims(extra), rc::gen::arbitrary<bool>()), [=](const std::pair<Shape, bool>& h) {
    Shape ids_shape = h.first;
    ids_shape.push_back(kMaxRows);
    ids_shape.push_back(kMaxLen);
    const Shape pos_shape = h.second && positions_extra ? ids_shape : Shape{kMaxRows, kMaxLen};
    return rc::gen::map(rc::gen::pair(ids_of(shape_product(ids_shape)), positions_of(shape_product(pos_shape), kMaxLen)),
                        [ids_shape, pos_shape](const auto& p) {
                          return PackedSide{IntArray(ids_shape, p.first), IntArray(pos_shape, p.second)};
                        });
  });
}

// The first `batch` rows and `len` tokens of every slice of [..., kMaxRows, kMaxLen].
IntArray cut(const IntArray& a, int64_t batch, int64_t len) {
  IntArray out = a;
  out.shape[out.shape.size() - 2] = batch;
  out.shape.back() = len;
  out.data.clear();
  for (int64_t r = 0; r * kMaxLen < static_cast<int64_t>(a.data.size()); ++r)
    if (r % kMaxRows < batch) out.data.insert(out.data.end(), a.data.begin() + r * kMaxLen, a.data.begin() + r * kMaxLen + len);
  return out;
}

// Positions restarted at 0 in every run of one id, each token keeping how far
// it was nudged down: for a domain of positions from 0, whose valid inputs
// must be documents 0, 1, 2, ... (a nudge still breaks one, as an invalid input).
PackedSide restart_positions(PackedSide side) {
  const IntArray& ids = side.segment_ids;
  const int64_t len = ids.shape.back(), pos_size = std::max<int64_t>(1, shape_product(side.segment_pos.shape));
  IntArray pos = IntArray::filled(ids.shape, 0);
  int64_t run_index = 0;
  for (int64_t t = 0; t < static_cast<int64_t>(ids.data.size()) && len > 0 && !side.segment_pos.data.empty(); ++t) {
    const int64_t col = t % len, nudge = col - side.segment_pos.data[t % pos_size];
    run_index = col == 0 || ids.data[t - 1] != ids.data[t] ? 0 : run_index + 1;
    pos.data[t] = run_index - nudge;
  }
  side.segment_pos = pos;
  return side;
}

// For a domain without padding, under a padding kind (where id 0 is valid
// padding): each 0 continues the id before it (1 at a row's start).
PackedSide without_padding(PackedSide side) {
  IntArray& ids = side.segment_ids;
  const int64_t len = ids.shape.back();
  for (int64_t t = 0; t < static_cast<int64_t>(ids.data.size()) && len > 0; ++t)
    if (ids.data[t] == 0) ids.data[t] = t % len == 0 ? 1 : ids.data[t - 1];
  return side;
}

// For a domain of one sequence a row: each row keeps the run of ids at its
// token 0; what follows is padding under a padding kind, else that document.
PackedSide one_sequence(PackedSide side, bool padding) {
  IntArray& ids = side.segment_ids;
  const int64_t len = ids.shape.back();
  for (int64_t t = 0; t < static_cast<int64_t>(ids.data.size()) && len > 0; ++t) {
    const int64_t col = t % len, first = ids.data[t - col];
    if (col == 0) continue;
    if (!padding) ids.data[t] = first != 0 ? first : ids.data[t];
    else if (ids.data[t - 1] == 0 || ids.data[t] != first) ids.data[t] = 0;
  }
  return side;
}

}  // namespace

// Drawn at full size throughout: the inputs are tiny anyway (T <= 8), and
// size-scaled ranges would leave the first half of a run with T near 0. Arrays
// are drawn at the largest shape and cut to B and T afterwards, so that shrinking
// B or T keeps the remaining tokens as they were (a redraw would lose the failure).
rc::Gen<PackedBatch> arbitrary_batch(const InputDomain& domain) {
  std::vector<MaskKind> masks;
  for (MaskKind kind : kAllMaskKinds)
    if (domain.takes_mask(kind)) masks.push_back(kind);
  // Positions restarted from 0 take the ids' shape: no extra dims when they must not carry them.
  const bool extra = domain.extra_dims && (domain.positions_extra_dims || !domain.positions_from_zero);
  auto full = rc::gen::build<PackedBatch>(
      rc::gen::set(&PackedBatch::q, full_side(extra, domain.positions_extra_dims)),
      rc::gen::set(&PackedBatch::kv, full_side(extra, domain.positions_extra_dims)),
      rc::gen::set(&PackedBatch::mask, shrinking_element(masks)),
      rc::gen::set(&PackedBatch::max_segments, shrinking_weighted<int64_t>({{8, rc::gen::inRange<int64_t>(1, 5)}, {1, rc::gen::just<int64_t>(0)}})));
  const int64_t max_rows = domain.max_rows > 0 ? std::min(kMaxRows, domain.max_rows) : kMaxRows;
  auto sizes = rc::gen::tuple(rc::gen::inRange<int64_t>(1, max_rows + 1), rc::gen::inRange<int64_t>(0, kMaxLen + 1),
                              rc::gen::inRange<int64_t>(0, kMaxLen + 1));
  const bool self = domain.self_attention_only, from_zero = domain.positions_from_zero, no_padding = domain.no_padding,
             sequences = domain.one_sequence_a_row;
  return rc::gen::resize(100, rc::gen::map(rc::gen::pair(sizes, full), [=](std::pair<std::tuple<int64_t, int64_t, int64_t>, PackedBatch> p) {
    const auto [batch, q_len, kv_len] = p.first;
    PackedBatch& b = p.second;
    for (auto [s, len] : {std::pair{&b.q, q_len}, std::pair{&b.kv, kv_len}}) {
      s->segment_ids = cut(s->segment_ids, batch, len);
      s->segment_pos = cut(s->segment_pos, batch, len);
    }
    if (no_padding && allows_padding(b.mask)) b.q = without_padding(b.q), b.kv = without_padding(b.kv);
    if (sequences) {
      const bool padding = allows_padding(b.mask) && !no_padding;
      b.q = one_sequence(b.q, padding), b.kv = one_sequence(b.kv, padding);
    }
    if (from_zero) b.q = restart_positions(b.q), b.kv = restart_positions(b.kv);
    if (self) b.kv = b.q;
    return b;
  }));
}

}  // namespace attn_oracle::properties
