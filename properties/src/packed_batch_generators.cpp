// packed_batch_generators.cpp: packed_batch, a valid batch drawn as a spec
// (batch_spec.hpp) and built: its head first (mask kind, edge mode, extra dims,
// row count, kernel-tile mode), then its rows of documents
// (document_generators.cpp), the window, trailing padding, spare capacity and
// each side's positions. Position modes: contiguous from 0, offset
// (micro-sequence), striped (context parallel). Extra leading dims 0..2 on
// either side, broadcastable. Also the budget a kernel-tile draw stays inside.
//
// Checked by tests/generators_test.cpp: every valid draw passes validation.
#include <algorithm>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"
#include "batch_spec.hpp"
#include "document_generators.hpp"

namespace attn_oracle::inline properties {
namespace {

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
}  // namespace attn_oracle::properties
