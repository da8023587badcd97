// document_generators.cpp: the rows of documents a packed batch is drawn with
// (document_generators.hpp): how many documents a row holds, their q and kv
// lengths, the padding before them, their id steps and first positions.
//
// Besides short documents (where packing bugs live and shrink to a few tokens),
// weighted edge modes: all documents full (no padding, both sides), many
// length-1 documents, an empty row, exactly M documents, a document on one side
// only, documents longer than a 16-token kernel tile, sides at tile edges (63,
// 64, 65, 127, 128, 129; deeper in the deep profile), and where opted in
// (BatchOptions::kernel_tile_weight) the kernel-tile mode: documents where GPU
// kernels tile, each length shrinking towards 1 (a bug past 256 keys shrinks to
// 257, one that needs no length to a few tokens).
//
// The kernel-tile mode's sizes: a document side of up to kLongDocMax tokens
// (uniform in 1..4096, or at the edges where kernels' tiles and key splits end:
// 255..257, 352, 353, 511..513, 1023..1025, 2047..2049, 4095, 4096), rows up to
// kLongRowMax tokens (BatchOptions::long_row_len), B up to 2 and no extra dims
// (B = 1 for mask kinds without padding, where a short row would grow its last
// document to the longest row), inside a budget of (query, key) pairs
// (KernelTileBudget, cap_kernel_tile_sizes). kLongDocMin, kLongDocMax,
// kLongRowMax: document_sizes.hpp.
#include "document_generators.hpp"

#include <algorithm>

#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

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

}  // namespace

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

}  // namespace attn_oracle::properties
