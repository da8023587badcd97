// generators.cpp: spec generators and the spec -> batch builder. See generators.hpp.
#include "attn_oracle/properties/generators.hpp"

#include <cstdlib>
#include <string>
#include "attn_oracle/properties/shrinking_choice.hpp"
#include "batch_spec.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace attn_oracle {
namespace {

// ------------------------------------------------------------------- building
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

}  // namespace

constexpr int64_t kMaxSegments = 6;

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

namespace {

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

}  // namespace attn_oracle

namespace attn_oracle {
namespace {

enum class EdgeMode { normal, all_full, unit_docs, empty_row, exactly_m, one_side, long_docs, tile_edges, kernel_tiles };

// Trailing padding drawn after the rows are fitted: rows keep room for it.
constexpr int kMaxTrailing = 3;

rc::Gen<EdgeMode> edge_mode(int tile_edge_weight) {
  return shrinking_weighted<EdgeMode>({
      {10, rc::gen::just(EdgeMode::normal)},
      {2, rc::gen::just(EdgeMode::all_full)},
      {2, rc::gen::just(EdgeMode::unit_docs)},
      {1, rc::gen::just(EdgeMode::empty_row)},
      {2, rc::gen::just(EdgeMode::exactly_m)},
      {2, rc::gen::just(EdgeMode::one_side)},
      {2, rc::gen::just(EdgeMode::long_docs)},
      {tile_edge_weight, rc::gen::just(EdgeMode::tile_edges)},
  });
}

// Whether a batch is drawn in the kernel-tile mode: `weight` of the edge
// modes' 21 + tile_edge_weight + weight, shrinking towards no. Drawn apart from
// the edge mode, after everything else a batch's head draws, so that a draw
// that is not a kernel-tile one is exactly the draw it was before the mode
// existed (RapidCheck splits the Random in argument order).
rc::Gen<bool> kernel_tile_mode(int tile_edge_weight, int weight) {
  if (weight <= 0) return rc::gen::just(false);
  return shrinking_weighted<bool>({{21 + tile_edge_weight, rc::gen::just(false)}, {weight, rc::gen::just(true)}});
}

// Lengths where kernels break: each side of a multiple of a tile (64, 128,
// and in the deep profile up to 4096), shrinking towards 1. One past a tile
// (65, 129, ...) is listed three times: there a kernel's last kv tile holds one
// key, and a running maximum that rises in it must rescale all the earlier tiles.
std::vector<int> tile_edge_lengths(int max_len, SizeProfile profile) {
  std::vector<int> out = {1};
  const std::vector<int> tiles = profile == SizeProfile::deep ? std::vector<int>{64, 128, 256, 512, 1024, 2048, 4096}
                                                                     : std::vector<int>{64, 128};
  for (int t : tiles)
    for (int l : {t - 1, t, t + 1})
      if (l <= max_len) out.push_back(l);
  for (int again = 0; again < 2; ++again)
    for (int t : tiles)
      if (t + 1 <= max_len) out.push_back(t + 1);
  return out;
}

// A long document side: uniform in 1..kLongDocMax (mostly past kLongDocMin) or
// at an edge where kernels' tiles and key splits end. Whatever is drawn then
// shrinks towards 1 by halving the distance (RapidCheck's shrink::towards), so
// that a failure found on a long document shrinks as far as the bug lets it:
// to 257 keys for a loop that stops after 256, to one or two tokens for a bug
// that needs no length at all (an edge list alone would stop at 255, the
// smallest edge but 1).
rc::Gen<int> long_length(int max_len) {
  std::vector<int> edges;
  for (int l : {255, 256, 257, 352, 353, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096})
    if (l <= max_len) edges.push_back(l);
  const int top = std::max(2, std::min(max_len, kLongDocMax) + 1);
  auto drawn = edges.empty() ? rc::gen::resize(100, rc::gen::inRange(1, top))
                             : shrinking_weighted<int>({{1, rc::gen::elementOf(edges)},
                                                        {1, rc::gen::resize(100, rc::gen::inRange(1, top))}});
  return rc::Gen<int>([drawn](const rc::Random& random, int size) {
    const int length = drawn(random, size).value();
    return rc::shrinkable::shrinkRecur(length, [](int x) { return rc::shrink::towards(x, 1); });
  });
}

// A property that needs a kind the domain excludes is skipped before it draws;
// the fallback keeps a direct caller of the generator drawing.
rc::Gen<MaskKind> mask_kind(const BatchOptions& o) {
  std::vector<MaskKind> kinds = drawable_masks(o);
  if (kinds.empty()) kinds.assign(std::begin(kAllMaskKinds), std::end(kAllMaskKinds));
  return shrinking_element(kinds);
}

// `ends_at_query`: the right side is 0 (a domain of causal windows only, on a kind without a causal term).
rc::Gen<Window> window(bool windows, bool ends_at_query) {
  if (!windows) return rc::gen::just(Window{});
  auto side = shrinking_weighted<int64_t>(
      {{3, rc::gen::just<int64_t>(-1)}, {1, rc::gen::just<int64_t>(0)}, {3, rc::gen::inRange<int64_t>(0, 9)}});
  return shrinking_weighted<Window>({
      {4, rc::gen::just(Window{})},
      {3, rc::gen::construct<Window>(side, ends_at_query ? rc::gen::just<int64_t>(0) : side)},
  });
}

// Length of one side of a document: size-scaled, 0 (missing on that side) rarely.
rc::Gen<int> side_length(EdgeMode mode, int max_len, SizeProfile profile) {
  if (mode == EdgeMode::unit_docs) return rc::gen::just(1);
  // Lengths up to 40 whatever the size, so that documents longer than a 16-row
  // kernel tile are drawn early; they still shrink towards 1.
  if (mode == EdgeMode::long_docs) return rc::gen::resize(100, rc::gen::inRange(1, std::max(2, std::min(max_len, 41))));
  if (mode == EdgeMode::tile_edges) return shrinking_element<int>(tile_edge_lengths(max_len - kMaxTrailing, profile));
  if (mode == EdgeMode::kernel_tiles && max_len > kLongDocMin) {
    // Mostly long; short ones beside them, and what a long one shrinks towards.
    return shrinking_weighted<int>({{1, side_length(EdgeMode::normal, 48, profile)}, {3, long_length(max_len - kMaxTrailing)}});
  }
  return rc::gen::withSize([=](int size) {
    const int top = std::max(2, std::min(max_len, 2 + size / 7));
    if (mode == EdgeMode::all_full || mode == EdgeMode::exactly_m) return rc::gen::inRange(1, top);
    const int missing_weight = mode == EdgeMode::one_side ? 4 : 1;
    return shrinking_weighted<int>({{10, rc::gen::inRange(1, top)},
                                        {static_cast<size_t>(missing_weight), rc::gen::just(0)}});
  });
}

rc::Gen<DocSpec> doc_spec(EdgeMode mode, bool padding, int max_len, SizeProfile profile) {
  const bool gaps = padding && mode != EdgeMode::all_full;
  // Kernel-tile rows reach their length through padding too, cheaply: a gap
  // costs tokens, not pairs.
  auto gap = !gaps ? rc::gen::just(0)
             : mode == EdgeMode::kernel_tiles
                 ? shrinking_weighted<int>({{3, rc::gen::just(0)}, {1, rc::gen::inRange(1, 4)},
                                            {1, rc::gen::resize(100, rc::gen::inRange(1, kLongDocMax + 1))}})
                 : shrinking_weighted<int>({{3, rc::gen::just(0)}, {1, rc::gen::inRange(1, 4)}});
  auto id_step = mode == EdgeMode::exactly_m || mode == EdgeMode::all_full
                     ? rc::gen::just(1)
                     : shrinking_weighted<int>({{6, rc::gen::just(1)}, {1, rc::gen::just(2)}});
  auto start = shrinking_weighted<int>({{1, rc::gen::just(0)}, {3, rc::gen::inRange(1, 17)}});
  return rc::gen::build<DocSpec>(
      rc::gen::set(&DocSpec::q_len, side_length(mode, max_len, profile)),
      rc::gen::set(&DocSpec::kv_len, side_length(mode, max_len, profile)),
      rc::gen::set(&DocSpec::q_gap, gap), rc::gen::set(&DocSpec::kv_gap, gap),
      rc::gen::set(&DocSpec::id_step, id_step), rc::gen::set(&DocSpec::q_start, start),
      rc::gen::set(&DocSpec::kv_start, start));
}

// Drops documents past `max_len` tokens on either side and ids past `max_docs`.
std::vector<DocSpec> fit_row(std::vector<DocSpec> docs, int max_len, int max_docs) {
  int q = 0, kv = 0, id = 0;
  std::vector<DocSpec> out;
  for (const DocSpec& d : docs) {
    q += d.q_len + d.q_gap;
    kv += d.kv_len + d.kv_gap;
    id += std::max(1, d.id_step);
    if (q > max_len || kv > max_len || id > max_docs) break;
    out.push_back(d);
  }
  return out;
}

// A domain of one sequence a row: the row's first document, with no padding before it.
std::vector<DocSpec> one_sequence(std::vector<DocSpec> docs) {
  docs.resize(std::min<size_t>(docs.size(), 1));
  for (DocSpec& d : docs) d.q_gap = d.kv_gap = 0;
  return docs;
}

rc::Gen<std::vector<DocSpec>> row_spec(EdgeMode mode, bool padding, BatchOptions o) {
  if (mode == EdgeMode::kernel_tiles) o.max_len = std::max(o.max_len, o.long_row_len);
  auto docs = rc::gen::withSize([=](int size) {
    // Two documents from the smallest sizes: most packing bugs need a neighbour.
    const int most = std::max(1, std::min(o.max_docs, 2 + size / 12));
    auto count = mode == EdgeMode::exactly_m ? rc::gen::just(most) : rc::gen::inRange(1, most + 1);
    return rc::gen::mapcat(count, [=](int n) {
      return rc::gen::container<std::vector<DocSpec>>(n, doc_spec(mode, padding, o.max_len, o.profile));
    });
  });
  return rc::gen::map(docs, [o](std::vector<DocSpec> d) {
    if (o.domain.one_sequence_a_row) d = one_sequence(std::move(d));
    return fit_row(std::move(d), o.max_len - kMaxTrailing, o.max_docs - 1);
  });
}

// Broadcast positions run along the whole row (not from 0 in each document):
// never drawn for a domain of positions from 0, always for one whose positions
// do not carry the extra dims.
rc::Gen<SideSpec> side_spec(Shape extra, bool contiguous_only, const InputDomain& d) {
  auto broadcast_pos = !d.positions_extra_dims ? rc::gen::just(true)
                       : d.positions_from_zero ? rc::gen::just(false)
                                               : rc::gen::arbitrary<bool>();
  auto mode = contiguous_only ? rc::gen::just(PositionMode::contiguous)
                              : shrinking_weighted<PositionMode>({{6, rc::gen::just(PositionMode::contiguous)},
                                                                      {2, rc::gen::just(PositionMode::offset)},
                                                                      {2, rc::gen::just(PositionMode::striped)}});
  return rc::gen::build<SideSpec>(rc::gen::set(&SideSpec::mode, mode),
                                  rc::gen::set(&SideSpec::stride, rc::gen::inRange(2, 5)),
                                  rc::gen::set(&SideSpec::broadcast_pos, broadcast_pos),
                                  rc::gen::set(&SideSpec::extra, rc::gen::just(std::move(extra))));
}

// q and kv extra shapes that broadcast: mostly none, else kv a broadcastable
// variant of q's (same, size-1 dims, or fewer leading dims) or the other way
// round, or a size-1 dim after a larger one.
rc::Gen<std::pair<Shape, Shape>> extra_shapes(bool enabled) {
  if (!enabled) return rc::gen::just(std::pair<Shape, Shape>{});
  auto full = rc::gen::mapcat(rc::gen::inRange(1, 3), [=](int rank) {
    return rc::gen::container<Shape>(rank, rc::gen::inRange<int64_t>(1, 4));
  });
  auto variant = rc::gen::mapcat(full, [](Shape s) {
    return rc::gen::map(rc::gen::container<std::vector<int>>(s.size() + 1, rc::gen::inRange(0, 3)),
                        [s](std::vector<int> choice) {
                          Shape other;
                          const size_t drop = choice.back() == 2 ? 1 : 0;
                          for (size_t k = drop; k < s.size(); ++k) other.push_back(choice[k] == 1 ? 1 : s[k]);
                          return choice.front() == 0 ? std::pair{s, other} : std::pair{other, s};
                        });
  });
  // A size-1 dim after a larger one ([a, 1] against [a, b]), on either side: the
  // broadcast a "size-1 dims only lead" reading gets wrong. It shrinks to no
  // extra dims through a = b = 1, so a bug elsewhere does not keep them.
  auto inner_one = rc::gen::map(
      rc::gen::tuple(rc::gen::inRange<int64_t>(1, 4), rc::gen::inRange<int64_t>(1, 4), rc::gen::arbitrary<bool>()),
      [](const std::tuple<int64_t, int64_t, bool>& t) {
        const auto [a, b, kv_has_one] = t;
        if (a == 1 && b == 1) return std::pair<Shape, Shape>{};
        const Shape full{a, b}, one{a, 1};
        return kv_has_one ? std::pair{full, one} : std::pair{one, full};
      });
  return shrinking_weighted<std::pair<Shape, Shape>>(
      {{5, rc::gen::just(std::pair<Shape, Shape>{})}, {2, variant}, {2, inner_one}});
}

// Self-attention: the q side drawn is the kv side too. The spec keeps both, so
// shrinking still acts on the q lengths and the copy follows.
BatchSpec kv_as_q(BatchSpec spec) {
  spec.kv = spec.q;
  spec.kv_trailing = spec.q_trailing;
  for (auto& slice : spec.slices)
    for (auto& row : slice)
      for (DocSpec& d : row) d.kv_len = d.q_len, d.kv_gap = d.q_gap, d.kv_start = d.q_start;
  return spec;
}

}  // namespace

// GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define ATTN_ORACLE_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_ORACLE_UNDER_ASAN 1
#endif
#endif

KernelTileBudget kernel_tile_budget(SizeProfile profile) {
#if defined(ATTN_ORACLE_UNDER_ASAN)
  // A Debug build with AddressSanitizer (scripts/sanitize): a pair costs about
  // 20 times a release build's, so a sixteenth of the pairs and work. The
  // lengths stay: a document of 4096 keys is still drawn, with fewer queries.
  KernelTileBudget b{int64_t{1} << 15, int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 26};
#else
  KernelTileBudget b{int64_t{1} << 19, int64_t{1} << 25, int64_t{1} << 21, int64_t{1} << 26};
#endif
  // 2 x pairs x (1 + kPairOverhead) <= work: a draw at the pair budget fits
  // with two query heads (GQA's least) of head_dim 1.
  if (profile == SizeProfile::deep) b.pairs *= 4, b.work *= 4, b.elements *= 4, b.cells *= 4;
  return b;
}

std::string_view to_string(SizeProfile profile) { return profile == SizeProfile::deep ? "deep" : "ci"; }

rc::Gen<PackedBatch> packed_batch(BatchOptions o) {
  if (o.profile == SizeProfile::deep) {
    o.max_len = std::max(o.max_len, kDeepMaxLen), o.max_docs = std::max(o.max_docs, 16);
    o.tile_edge_weight = std::max(o.tile_edge_weight, 6);
  }
  struct Head {
    MaskKind mask;
    EdgeMode mode;
    std::pair<Shape, Shape> extra;
    int rows;
    bool kernel_tiles;
  };
  const InputDomain& d = o.domain;
  if (d.max_rows > 0) o.max_rows = std::max(1, static_cast<int>(std::min<int64_t>(o.max_rows, d.max_rows)));
  // Shared positions run along the row, so positions from 0 leave no extra dims to draw.
  o.extra_dims = o.extra_dims && d.extra_dims && (d.positions_extra_dims || !d.positions_from_zero);
  o.contiguous_positions = o.contiguous_positions || d.positions_from_zero;
  o.max_len = static_cast<int>(menu_max_tokens(d, o.max_len));
  o.long_row_len = static_cast<int>(menu_max_tokens(d, o.long_row_len));
  o.max_rows = static_cast<int>(menu_max_rows(d, o.max_rows));
  o.max_docs = static_cast<int>(menu_max_docs(d, o.max_docs));  // ids <= the menu's largest M
  if (o.long_row_len <= kLongDocMin) o.kernel_tile_weight = 0;  // a size menu's short sides
  auto head = rc::gen::construct<Head>(mask_kind(o), edge_mode(o.tile_edge_weight), extra_shapes(o.extra_dims),
                                       rc::gen::inRange(1, o.max_rows + 1),
                                       kernel_tile_mode(o.tile_edge_weight, o.kernel_tile_weight));
  auto spec = rc::gen::mapcat(head, [o](Head h) {
    const bool padding = allows_padding(h.mask) && !o.domain.no_padding;
    if (h.kernel_tiles) {
      h.mode = EdgeMode::kernel_tiles;
      // No extra dims, and B = 1 without padding: no short row grows its last
      // document to a long row's length, which the pair budget would not see.
      h.extra = {};
      h.rows = padding ? std::min(h.rows, 2) : 1;
    }
    if (o.domain.self_attention_only) h.extra.second = h.extra.first;
    const Shape extra = broadcast_shapes(h.extra.first, h.extra.second).value();
    auto rows = rc::gen::container<std::vector<std::vector<DocSpec>>>(h.rows, row_spec(h.mode, padding, o));
    auto slices = rc::gen::container<std::vector<std::vector<std::vector<DocSpec>>>>(
        shape_product(extra), rows);
    if (h.mode == EdgeMode::empty_row && padding)
      slices = rc::gen::map(slices, [](auto s) {
        s.front().back().clear();
        return s;
      });
    // Kernel-tile rows reach up to long_row_len through trailing padding as well.
    auto trailing = !padding ? rc::gen::just(0)
                    : h.mode == EdgeMode::kernel_tiles
                        ? shrinking_weighted<int>({{2, rc::gen::just(0)}, {1, rc::gen::inRange(1, kMaxTrailing + 1)},
                                                   {1, rc::gen::resize(100, rc::gen::inRange(1, o.long_row_len + 1))}})
                        : shrinking_weighted<int>({{2, rc::gen::just(0)}, {1, rc::gen::inRange(1, kMaxTrailing + 1)}});
    auto spare = h.mode == EdgeMode::exactly_m ? rc::gen::just(0) : rc::gen::inRange(0, 2);
    const bool long_mode = h.mode == EdgeMode::kernel_tiles;
    // The caps come last: the fields before them split the Random as they did before they existed.
    return rc::gen::build<BatchSpec>(
        rc::gen::set(&BatchSpec::mask, rc::gen::just(h.mask)), rc::gen::set(&BatchSpec::window, window(o.domain.windows, o.domain.causal_windows_only && !is_causal(h.mask))),
        rc::gen::set(&BatchSpec::spare_capacity, spare), rc::gen::set(&BatchSpec::q_trailing, trailing),
        rc::gen::set(&BatchSpec::kv_trailing, trailing),
        // Kernel-tile draws keep positions from 0: representable, so that a
        // kernel (which sees only the metadata) is judged on every one.
        rc::gen::set(&BatchSpec::q, side_spec(h.extra.first, o.contiguous_positions || long_mode, o.domain)),
        rc::gen::set(&BatchSpec::kv, side_spec(h.extra.second, o.contiguous_positions || long_mode, o.domain)),
        rc::gen::set(&BatchSpec::slices, slices),
        rc::gen::set(&BatchSpec::max_pairs, rc::gen::just(long_mode ? kernel_tile_budget(o.profile).pairs : int64_t{0})),
        // Half the cells: room for two query heads, the fewest a GQA draw keeps.
        rc::gen::set(&BatchSpec::max_cells, rc::gen::just(long_mode ? kernel_tile_budget(o.profile).cells / 2 : int64_t{0})),
        rc::gen::set(&BatchSpec::max_row_tokens, rc::gen::just(long_mode ? int64_t{o.long_row_len} : int64_t{0})));
  });
  // Set after drawing, so that the draws of every other domain stay as they were.
  if (o.domain.no_padding) spec = rc::gen::map(spec, [](BatchSpec s) { return s.no_padding = true, s; });
  if (o.domain.self_attention_only) spec = rc::gen::map(spec, kv_as_q);
  if (!d.sizes.max_segments.empty()) {
    const int64_t cap = *std::max_element(d.sizes.max_segments.begin(), d.sizes.max_segments.end());
    spec = rc::gen::map(spec, [cap](BatchSpec s) { return s.id_cap = cap, s; });
  }
  return rc::gen::map(spec, [domain = o.domain](const BatchSpec& s) {
    return on_size_menu(build_batch(cap_kernel_tile_sizes(s, domain.self_attention_only)), domain);
  });
}

std::vector<MaskKind> drawable_masks(const BatchOptions& o) {
  std::vector<MaskKind> out;
  for (MaskKind kind : kAllMaskKinds)
    if (o.domain.takes_mask(kind) && (o.any_mask || allows_padding(kind))) out.push_back(kind);
  return out;
}

BatchOptions within(const InputDomain& domain, BatchOptions options) {
  options.domain = domain;
  return options;
}

}  // namespace attn_oracle

namespace attn_oracle {
namespace {

// The domain's dtypes among those the options draw; all of the domain's when
// they exclude each other (fp32 only asked of a backend without fp32).
std::vector<Dtype> drawable_dtypes(const AttentionOptions& o) {
  std::vector<Dtype> out;
  for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (o.batch.domain.takes_dtype(dtype) && (o.low_precision || dtype == Dtype::fp32)) out.push_back(dtype);
  return out.empty() ? o.batch.domain.dtypes : out;
}

struct Heads {
  int64_t kv, group, dim;
  Dtype dtype;
  bool backward, explicit_scale;
  bool wide_group;  // 8 query heads a kv head instead of `group`
  // With a document one key past a kernel kv tile (document_sizes.hpp): a head dim
  // of the kernels' wide path (64 or more) where the drawn one is narrower.
  bool wide_at_tile_edge;
};

// 1 draw in 4 a group of 8 (Llama-3 70B), shrinking towards the group drawn
// beside it; drawn last, so that the other draws stay as they were.
rc::Gen<bool> wide_group() { return shrinking_weighted<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}}); }

// 3 draws in 4 (shrinking towards no); drawn after wide_group, for the same reason.
rc::Gen<bool> wide_at_tile_edge() {
  return shrinking_weighted<bool>({{1, rc::gen::just(false)}, {3, rc::gen::just(true)}});
}

// The smallest of `dims` (sorted) that is 64 or more, for a draw at a tile edge; `dim` when none is.
int64_t wide_dim(const std::vector<int64_t>& dims, int64_t dim) {
  for (int64_t d : dims)
    if (d >= 64) return std::max(d, dim);
  return dim;
}

// Rows x the longer side's T (the tokens of each [rows, T, heads, D] tensor),
// and rows x Tq x Tkv (one head's scores).
struct BatchExtent {
  int64_t tokens = 0, cells = 0;
};

BatchExtent batch_extent(const PackedBatch& b) {
  const Shape& q = b.q.segment_ids.shape;
  const Shape& kv = b.kv.segment_ids.shape;
  if (q.size() < 2 || kv.size() < 2) return {};
  const int64_t rows = shape_product(Shape(q.begin(), q.end() - 1));
  return {rows * std::max(q.back(), kv.back()), rows * q.back() * kv.back()};
}

// The heads of a draw that would pass the budget (kernel_tile_budget: work
// where a document is long, elements and cells always), taken down until it
// fits: one kv head, then half the group (down to min_group: 2 keeps a GQA
// draw GQA), then the next smaller of `dims` (sorted). Short draws never reach
// it; a size menu's heads stay as they are.
Heads within_work_budget(Heads h, const DocumentSizes& docs, const BatchExtent& extent,
                         const std::vector<int64_t>& dims, int64_t min_group, const KernelTileBudget& budget) {
  const bool long_docs = docs.longest >= kLongDocMin;  // the short draws' heads stay as drawn
  auto fits = [&] {
    const int64_t heads = h.kv * h.group, width = heads * h.dim;
    return (!long_docs || docs.pairs * heads * (h.dim + kPairOverhead) <= budget.work) &&
           extent.tokens * width <= budget.elements && extent.cells * heads <= budget.cells;
  };
  if (fits()) return h;
  h.kv = 1;
  while (!fits() && h.group > min_group) h.group /= 2;
  for (auto d = dims.rbegin(); d != dims.rend() && !fits(); ++d)
    if (*d < h.dim) h.dim = *d;
  return h;
}

}  // namespace

rc::Gen<AttentionDraw> attention_draw(AttentionOptions o) {
  auto dtype = shrinking_element<Dtype>(drawable_dtypes(o));
  auto group = o.gqa ? shrinking_element<int64_t>({2, 4}) : shrinking_element<int64_t>({1, 2, 4});
  // 9 draws in 14 from {1, 2, 4, 8}, 4 in 14 the kernels' 64, 128 or 256 (where
  // a kernel's wide-head path lives); a failure shrinks towards head_dim 1.
  // A domain's head dims are drawn alike, shrinking towards the smallest.
  std::vector<int64_t> dims = o.batch.domain.head_dims;
  std::sort(dims.begin(), dims.end());
  if (dims.empty()) dims = {1, 2, 4, 8, 1, 2, 4, 8, 1, 16, 64, 64, 128, 256};
  auto dim = shrinking_element<int64_t>(dims);
  auto backward = o.backward ? rc::gen::arbitrary<bool>() : rc::gen::just(false);
  auto explicit_scale = shrinking_element<bool>({false, false, false, false, true});  // scale 0.5, 1 in 5
  auto heads = rc::gen::construct<Heads>(shrinking_element<int64_t>({1, 2}), group, dim, dtype, backward, explicit_scale,
                                         wide_group(), wide_at_tile_edge());
  // A size menu's heads, the GQA ones for `gqa` (all of them when it has none);
  // without a menu the draws stay exactly as they were.
  std::vector<std::pair<int64_t, int64_t>> menu_heads;
  for (const auto& [q, kv] : o.batch.domain.sizes.heads)
    if (!o.gqa || q > kv) menu_heads.emplace_back(kv, q / kv);
  if (menu_heads.empty())
    for (const auto& [q, kv] : o.batch.domain.sizes.heads) menu_heads.emplace_back(kv, q / kv);
  if (!menu_heads.empty())
    heads = rc::gen::mapcat(shrinking_element(menu_heads), [=](std::pair<int64_t, int64_t> kv_group) {
      return rc::gen::construct<Heads>(rc::gen::just(kv_group.first), rc::gen::just(kv_group.second), dim, dtype,
                                       backward, explicit_scale, rc::gen::just(false), rc::gen::just(false));
    });
  const bool menu = !menu_heads.empty();
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return rc::gen::map(
      rc::gen::tuple(packed_batch(o.batch), heads, rc::gen::arbitrary<uint64_t>()),
      [dims, menu, min_group = o.gqa ? int64_t{2} : int64_t{1},
       budget = kernel_tile_budget(o.batch.profile)](const std::tuple<PackedBatch, Heads, uint64_t>& t) {
        const auto& [batch, as_drawn, seed] = t;
        Heads drawn = as_drawn;
        if (drawn.wide_group) drawn.group = 8;
        if (drawn.wide_at_tile_edge && drawn.dim < 64 && document_sizes(batch).one_key_past_a_tile > 0)
          drawn.dim = wide_dim(dims, drawn.dim);
        const Heads h =
            menu ? drawn : within_work_budget(drawn, document_sizes(batch), batch_extent(batch), dims, min_group, budget);
        AttentionDraw d;
        d.problem.batch = batch;
        d.problem.shape.heads_kv = h.kv;
        d.problem.shape.heads_q = h.kv * h.group;
        d.problem.shape.head_dim = h.dim;
        d.problem.shape.dtype = h.dtype;
        d.problem.shape.backward = h.backward;
        if (h.explicit_scale) d.problem.shape.scale = 0.5;
        d.seed = seed;
        return d;
      });
}

}  // namespace attn_oracle

namespace attn_oracle {

AttentionShape nearest_supported_shape(const AttentionProblem& problem,
                                       const std::function<bool(const AttentionProblem&)>& supported) {
  if (supported(problem)) return problem.shape;
  AttentionProblem wider = problem;
  wider.shape.head_dim = 64;
  for (Dtype dtype : {problem.shape.dtype, Dtype::bf16, Dtype::fp16}) {
    wider.shape.dtype = dtype;
    if (supported(wider)) return wider.shape;
  }
  return problem.shape;
}

}  // namespace attn_oracle
