// size_menu_draws.cpp: shape-stable draws (generators.hpp, "size menu") for
// backends that compile once per shape. A batch is drawn as usual, within the
// menu's largest sizes, and then grown onto the menu: shrinking acts on the
// spec underneath, so every shrunk case is on the menu too.
//
// Under a size menu (input_domain.hpp) packed_batch draws within the menu's
// largest T and B and grows each batch onto the menu: T of each side and B to
// the next size on it (padding tokens where the mask kind and the domain allow
// padding, else each row's last document runs on and new rows are one
// document), M likewise; attention_draw draws the menu's heads. Invalid-input
// draws plant their violation into a batch on the menu (a violation of shape
// takes it off). Left as they are: small_seq, kv_buffer, sharding and
// arbitrary-input draws, whose sizes are their subject. The menu costs
// coverage, said where it shows (shape_stable_note): tile-edge sides (63, 127,
// 129) only as padding inside a longer side or grown to the next size, no
// sides without tokens, no extra dims, exactly M documents only for M on the
// menu.
//
// The domain the generators draw in (drawing_domain): the backend's, with
// default_size_menu() folded in under shape-stable draws (`check
// --shape-stable`, DrawSettings::shape_stable) when it declares no menu (no
// extra dims, kMenuHeadDims when it lists no head dims). A run computes it
// once (DrawContext, property_runner.hpp).
//
// Checked by tests/size_menu_test.cpp.
#include <algorithm>
#include <string>

#include "attn_oracle/properties/generators.hpp"

namespace attn_oracle::inline properties {
namespace {

int64_t max_id(const PackedSide& side) {
  const std::vector<int64_t>& ids = side.segment_ids.data;
  return ids.empty() ? 0 : *std::max_element(ids.begin(), ids.end());
}

int64_t largest(const std::vector<int64_t>& menu, int64_t otherwise) {
  return menu.empty() ? otherwise : *std::max_element(menu.begin(), menu.end());
}

// One [rows, len] block of ids and positions grown to [rows2, len2]. A padding
// side pads with id 0; otherwise a row's last document runs on (positions go on
// by its last step) and a new row is one document, id 1, at 0, 1, 2, ...
void grow_block(const int64_t* ids, const int64_t* pos, int64_t rows, int64_t len, int64_t* ids2, int64_t* pos2,
                int64_t rows2, int64_t len2, bool padding) {
  for (int64_t r = 0; r < rows2; ++r) {
    for (int64_t t = 0; t < len2; ++t) {
      int64_t& id = ids2[r * len2 + t];
      int64_t& p = pos2[r * len2 + t];
      if (r < rows && t < len) {
        id = ids[r * len + t], p = pos[r * len + t];
      } else if (padding) {
        id = 0, p = 0;
      } else if (t == 0) {
        id = 1, p = 0;
      } else {
        const int64_t prev = r * len2 + t - 1;
        const bool two = t >= 2 && ids2[prev - 1] == ids2[prev];
        id = ids2[prev], p = pos2[prev] + (two ? pos2[prev] - pos2[prev - 1] : 1);
      }
    }
  }
}

// Ids [..., B, T] and positions of the same shape or a broadcast [B, T].
void grow_side(PackedSide& side, int64_t rows2, int64_t len2, bool padding) {
  const Shape& shape = side.segment_ids.shape;
  if (shape.size() < 2) return;
  const int64_t rows = shape[shape.size() - 2], len = shape.back();
  if (rows == rows2 && len == len2) return;
  Shape grown = shape;
  grown[grown.size() - 2] = rows2, grown.back() = len2;
  const bool broadcast_pos = side.segment_pos.shape != shape;
  const int64_t slices = shape_product(Shape(shape.begin(), shape.end() - 2));
  IntArray ids = IntArray::filled(grown, 0), pos = IntArray::filled(grown, 0);
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t* p = side.segment_pos.data.data() + (broadcast_pos ? 0 : s * rows * len);
    grow_block(side.segment_ids.data.data() + s * rows * len, p, rows, len, ids.data.data() + s * rows2 * len2,
               pos.data.data() + s * rows2 * len2, rows2, len2, padding);
  }
  side.segment_ids = std::move(ids);
  if (!broadcast_pos) {
    side.segment_pos = std::move(pos);
    return;
  }
  // Shared positions grow as slice 0's row does.
  IntArray shared = IntArray::filled({rows2, len2}, 0);
  std::copy(pos.data.begin(), pos.data.begin() + rows2 * len2, shared.data.begin());
  side.segment_pos = std::move(shared);
}

}  // namespace

InputDomain drawing_domain(InputDomain d, bool shape_stable) {
  if (d.sizes.empty() && shape_stable) {
    d.sizes = default_size_menu();
    d.extra_dims = false;
    if (d.head_dims.empty()) d.head_dims = kMenuHeadDims;
  }
  return d;
}

PackedBatch on_size_menu(PackedBatch batch, const InputDomain& domain) {
  const SizeMenu& menu = domain.sizes;
  if (menu.empty()) return batch;
  const bool padding = allows_padding(batch.mask) && !domain.no_padding;
  const Shape& shape = batch.q.segment_ids.shape;
  if (shape.size() < 2) return batch;
  const int64_t rows = next_on_menu(menu.rows, shape[shape.size() - 2]);
  for (PackedSide* side : {&batch.q, &batch.kv})
    grow_side(*side, rows, next_on_menu(menu.tokens, side->segment_ids.shape.back()), padding);
  // Spare capacity past the menu is dropped: the smallest M on it that holds the ids used.
  const std::vector<int64_t>& ms = menu.max_segments;
  batch.max_segments = next_on_menu(ms, batch.max_segments);
  if (!ms.empty() && std::find(ms.begin(), ms.end(), batch.max_segments) == ms.end())
    batch.max_segments = next_on_menu(ms, std::max<int64_t>({1, max_id(batch.q), max_id(batch.kv)}));
  return batch;
}

std::string shape_stable_note() {
  return "sizes from a menu unless a backend declares its own (" + to_string(drawing_domain({}, true)) +
         "); left out: sides of 63, 127 or 129 tokens (inside a longer padded side, or grown to the next size), "
         "sides with no tokens, extra dims, exactly M documents for M off the menu; small_seq, kv_buffer, sharding "
         "and arbitrary-input draws keep their own sizes";
}

int64_t menu_max_tokens(const InputDomain& domain, int64_t otherwise) {
  return std::min(otherwise, largest(domain.sizes.tokens, otherwise));
}

int64_t menu_max_rows(const InputDomain& domain, int64_t otherwise) {
  return std::min(otherwise, largest(domain.sizes.rows, otherwise));
}

int64_t menu_max_docs(const InputDomain& domain, int64_t otherwise) {
  // Ids per row stay below max_docs (BatchOptions): at most the menu's largest M.
  return std::min(otherwise, largest(domain.sizes.max_segments, otherwise - 1) + 1);
}

}  // namespace attn_oracle::properties
