// invalid_generators.cpp: batches with exactly one violation of
// docs/semantics.md#input-validation-in-precedence-order, tagged with the code the validator must
// give. Each injection is placed so that no code of higher precedence applies (for example a
// too-large id goes on the last token of a row, where it cannot split a document into two runs).
// Drawn inside the domain's shape fields (input_domain.hpp): the base batch within the domain, the
// violations the domain's calls can carry, planted into both sides of a self-attention batch.
#include <algorithm>
#include <optional>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline properties {
namespace {

enum class Violation {
  bad_max_segments, rank_mismatch, shape_mismatch, batch_mismatch, extra_dims_mismatch,
  negative_id, noncontiguous_segment, too_many_segments, ids_out_of_order,
  padding_with_non_padding_mask, positions_not_increasing, negative_position,
};

// Positions with the full shape of the ids, so that one edit touches one row.
void materialise_positions(PackedSide& side) {
  if (side.segment_pos.shape == side.segment_ids.shape) return;
  const int64_t n = shape_product(side.segment_ids.shape), m = shape_product(side.segment_pos.shape);
  IntArray full = IntArray::filled(side.segment_ids.shape, 0);
  for (int64_t i = 0; i < n; ++i) full.data[i] = side.segment_pos.data[i % m];
  side.segment_pos = full;
}

struct Run {
  int64_t begin, end;  // [begin, end) inside the row
};

std::vector<Run> documents(const PackedSide& side, int64_t row) {
  const int64_t len = side.segment_ids.shape.back();
  const int64_t* ids = side.segment_ids.data.data() + row * len;
  std::vector<Run> runs;
  for (int64_t t = 0; t < len; ++t) {
    if (ids[t] == 0) continue;
    if (t == 0 || ids[t - 1] != ids[t]) runs.push_back({t, t});
    runs.back().end = t + 1;
  }
  return runs;
}

// The smallest batch showing `code` under `mask` (the drawn one, so that it
// stays inside the domain), for when the drawn batch has no room for it.
InvalidBatch canonical(ErrorCode code, MaskKind mask) {
  PackedBatch b;
  b.mask = mask;
  b.max_segments = 2;
  b.kv.segment_ids = IntArray({1, 2}, {1, 2});
  b.kv.segment_pos = IntArray({1, 2}, {0, 0});
  b.q = b.kv;
  switch (code) {
    case ErrorCode::ids_out_of_order: b.q.segment_ids.data = {2, 1}; break;
    case ErrorCode::noncontiguous_segment:
      b.q.segment_ids = IntArray({1, 3}, {1, allows_padding(mask) ? 0 : 2, 1});
      b.q.segment_pos = IntArray({1, 3}, {0, 0, 1});
      break;
    case ErrorCode::positions_not_increasing: b.q.segment_ids.data = {1, 1}; b.q.segment_pos.data = {1, 1}; break;
    default: b.q.segment_ids.data = {1, 1}; b.q.segment_pos.data = {0, -1}; code = ErrorCode::positions_not_increasing;
  }
  return {b, code};
}

// Picks a side-row index; `choice` spreads over q and kv rows.
std::pair<PackedSide*, int64_t> pick_row(PackedBatch& b, int64_t choice) {
  const int64_t q_rows = shape_product(b.q.segment_ids.shape) / std::max<int64_t>(1, b.q.segment_ids.shape.back());
  const int64_t kv_rows = shape_product(b.kv.segment_ids.shape) / std::max<int64_t>(1, b.kv.segment_ids.shape.back());
  choice %= std::max<int64_t>(1, q_rows + kv_rows);
  return choice < q_rows ? std::pair{&b.q, choice} : std::pair{&b.kv, choice - q_rows};
}

// What the domain asks of a planted violation: the mask a padding token goes
// under, the mask of a canonical batch, and whether only q is edited (then
// copied to kv, for self-attention).
struct Planting {
  MaskKind non_padding = MaskKind::causal;
  MaskKind canonical = MaskKind::padding;
  bool q_only = false;
};

InvalidBatch inject_row_violation(PackedBatch b, Violation v, int64_t choice, int64_t amount, const Planting& planting) {
  const bool q_only = planting.q_only;
  const MaskKind non_padding = planting.non_padding;
  if (q_only) choice %= std::max<int64_t>(1, shape_product(b.q.segment_ids.shape) / std::max<int64_t>(1, b.q.segment_ids.shape.back()));
  auto [side, row] = pick_row(b, choice);
  const int64_t len = side->segment_ids.shape.back();
  if (len == 0) return canonical(ErrorCode::ids_out_of_order, planting.canonical);
  int64_t* ids = side->segment_ids.data.data() + row * len;
  const std::vector<Run> docs = documents(*side, row);
  switch (v) {
    case Violation::negative_id:
      ids[choice % len] = -amount;
      return {b, ErrorCode::negative_id};
    case Violation::too_many_segments:
      ids[len - 1] = b.max_segments + amount;
      return {b, ErrorCode::too_many_segments};
    case Violation::noncontiguous_segment:
      // The first document's id again on the last token, after another id or
      // (odd `amount`) after padding; needs a token between them.
      if (docs.empty() || docs.front().end >= len - 1) return canonical(ErrorCode::noncontiguous_segment, planting.canonical);
      ids[len - 1] = ids[docs.front().begin];
      if (amount % 2 == 1) ids[len - 2] = 0;
      return {b, ErrorCode::noncontiguous_segment};
    case Violation::ids_out_of_order: {
      if (docs.size() < 2) return canonical(ErrorCode::ids_out_of_order, planting.canonical);
      const Run first = docs[docs.size() - 2], second = docs.back();
      const int64_t a = ids[first.begin], c = ids[second.begin];
      std::fill(ids + first.begin, ids + first.end, c);
      std::fill(ids + second.begin, ids + second.end, a);
      return {b, ErrorCode::ids_out_of_order};
    }
    case Violation::padding_with_non_padding_mask:
      if (allows_padding(b.mask)) b.mask = non_padding;  // drawn without padding tokens
      ids[len - 1] = 0;
      return {b, ErrorCode::padding_with_non_padding_mask};
    case Violation::positions_not_increasing:
    case Violation::negative_position: {
      materialise_positions(*side);
      int64_t* pos = side->segment_pos.data.data() + row * len;
      const Run d = docs.empty() ? Run{0, 0} : docs[choice % docs.size()];
      if (v == Violation::negative_position && !docs.empty()) {
        pos[d.begin] = -amount;
        return {b, ErrorCode::negative_position};
      }
      if (d.end - d.begin < 2) return canonical(ErrorCode::positions_not_increasing, planting.canonical);
      const int64_t t = d.begin + 1 + choice % (d.end - d.begin - 1);
      // Equal to the previous position for odd `amount` (the edge a non-strict
      // comparison misses, and where shrinking goes), one below it for 2.
      pos[t] = pos[t - 1] - (amount % 2 == 1 ? 0 : 1);
      return {b, ErrorCode::positions_not_increasing};
    }
    default:
      return canonical(ErrorCode::positions_not_increasing, planting.canonical);
  }
}

// Leading extra dims of sizes 2 (q) and 3 (kv) after aligning the ranks.
void prepend_mismatched_dims(PackedBatch& b) {
  const size_t rank = std::max(b.q.segment_ids.shape.size(), b.kv.segment_ids.shape.size());
  for (auto [side, lead] : {std::pair{&b.q, int64_t{2}}, std::pair{&b.kv, int64_t{3}}}) {
    for (IntArray* a : {&side->segment_ids, &side->segment_pos}) {
      const bool is_ids = a == &side->segment_ids;
      if (!is_ids && a->shape.size() < side->segment_ids.shape.size()) continue;  // broadcast pos
      while (a->shape.size() < rank) a->shape.insert(a->shape.begin(), 1);
      const std::vector<int64_t> once = a->data;
      for (int64_t k = 1; k < lead; ++k) a->data.insert(a->data.end(), once.begin(), once.end());
      a->shape.insert(a->shape.begin(), lead);
    }
  }
}

InvalidBatch inject_whole_input_violation(PackedBatch b, Violation v, int64_t amount) {
  switch (v) {
    case Violation::bad_max_segments:
      b.max_segments = 1 - amount;
      return {b, ErrorCode::bad_max_segments};
    case Violation::rank_mismatch:  // positions with one more leading dim than the ids
      materialise_positions(b.kv);
      b.kv.segment_pos.shape.insert(b.kv.segment_pos.shape.begin(), 1);
      return {b, ErrorCode::rank_mismatch};
    case Violation::shape_mismatch:  // positions flattened to one dim
      b.q.segment_pos.shape = {shape_product(b.q.segment_pos.shape)};
      return {b, ErrorCode::shape_mismatch};
    case Violation::batch_mismatch: {  // kv gains a row
      PackedSide& kv = b.kv;
      materialise_positions(kv);
      const int64_t len = kv.segment_ids.shape.back();
      kv.segment_ids = IntArray({1, 1, len}, std::vector<int64_t>(kv.segment_ids.data.begin(), kv.segment_ids.data.begin() + len));
      kv.segment_pos = IntArray({1, 1, len}, std::vector<int64_t>(kv.segment_pos.data.begin(), kv.segment_pos.data.begin() + len));
      const int64_t q_batch = b.q.segment_ids.shape[b.q.segment_ids.shape.size() - 2];
      if (q_batch == 1) {  // make kv B = 2
        kv.segment_ids.data.insert(kv.segment_ids.data.end(), kv.segment_ids.data.begin(), kv.segment_ids.data.end());
        kv.segment_pos.data.insert(kv.segment_pos.data.end(), kv.segment_pos.data.begin(), kv.segment_pos.data.end());
        kv.segment_ids.shape = kv.segment_pos.shape = {1, 2, len};
      }
      return {b, ErrorCode::shape_mismatch};
    }
    case Violation::extra_dims_mismatch:
      prepend_mismatched_dims(b);
      return {b, ErrorCode::extra_dims_mismatch};
    default:
      return canonical(ErrorCode::positions_not_increasing, MaskKind::padding);
  }
}

// The mask a padding token is planted under: causal, or another non-padding
// kind the domain takes; nullopt when it takes none.
std::optional<MaskKind> non_padding_kind(const InputDomain& d) {
  for (MaskKind kind : {MaskKind::causal, MaskKind::no_mask, MaskKind::causal_bottom_right})
    if (d.takes_mask(kind)) return kind;
  return std::nullopt;
}

// The violations an input inside the domain's shape fields can carry: a
// self-attention backend takes one batch for both sides, so q and kv can
// differ in no row count or extra dims.
std::vector<Violation> violations_within(const InputDomain& d) {
  std::vector<Violation> out;
  for (Violation v : {Violation::bad_max_segments, Violation::rank_mismatch, Violation::shape_mismatch,
                      Violation::batch_mismatch, Violation::extra_dims_mismatch, Violation::negative_id,
                      Violation::noncontiguous_segment, Violation::too_many_segments, Violation::ids_out_of_order,
                      Violation::padding_with_non_padding_mask, Violation::positions_not_increasing,
                      Violation::negative_position}) {
    const bool two_sided = v == Violation::batch_mismatch || v == Violation::extra_dims_mismatch;
    if (two_sided && d.self_attention_only) continue;
    if (v == Violation::extra_dims_mismatch && !d.extra_dims) continue;
    // kv becomes [1, 2, T] (or [1, 1, T] beside two q rows)
    if (v == Violation::batch_mismatch && (!d.extra_dims || d.max_rows == 1)) continue;
    if (v == Violation::padding_with_non_padding_mask && !non_padding_kind(d)) continue;
    out.push_back(v);
  }
  return out;
}

// Self-attention: the side the violation went into is both sides (rank_mismatch
// edits kv's positions, every other violation q or neither).
InvalidBatch as_self_attention(InvalidBatch d, Violation v) {
  if (v == Violation::rank_mismatch) d.batch.q = d.batch.kv;
  else d.batch.kv = d.batch.q;
  return d;
}

}  // namespace

rc::Gen<InvalidBatch> invalid_batch(const InputDomain& declared, SizeProfile profile) {
  // Violations in positions materialise them over the extra dims: a domain whose
  // positions do not carry them gets its invalid draws without extra dims.
  InputDomain domain = declared;
  domain.extra_dims = domain.extra_dims && domain.positions_extra_dims;
  auto violation = shrinking_element<Violation>(violations_within(domain));
  return rc::gen::mapcat(violation, [domain, profile](Violation v) {
    BatchOptions options = within(domain);
    options.profile = profile;
    options.any_mask = v != Violation::noncontiguous_segment;  // room for a padding gap
    if (drawable_masks(options).empty()) options.any_mask = true;
    auto base = packed_batch(options);
    return rc::gen::map(rc::gen::tuple(base, rc::gen::inRange<int64_t>(0, 1000), rc::gen::inRange<int64_t>(1, 4)),
                        [v, domain](const std::tuple<PackedBatch, int64_t, int64_t>& t) {
                          const auto& [b, choice, amount] = t;
                          const Planting planting{non_padding_kind(domain).value_or(MaskKind::causal),
                                                  domain.takes_mask(MaskKind::padding) ? MaskKind::padding : b.mask,
                                                  domain.self_attention_only};
                          InvalidBatch d = v <= Violation::extra_dims_mismatch
                                               ? inject_whole_input_violation(b, v, amount)
                                               : inject_row_violation(b, v, choice, amount, planting);
                          return planting.q_only ? as_self_attention(std::move(d), v) : d;
                        });
  });
}

}  // namespace attn_oracle::properties
