// tiled_attention.hpp: a compact planted tiled forward, the shape of the fused
// kernels (gpu/include/attn_oracle/gpu/attention/*.hpp: DocSpan, kv_tile_range,
// index_allowed, flash_tile.hpp's base-2 online-softmax steps, rounding) on small
// tiles so that short documents already have several kv tiles. Each flag plants one
// bug a real FlashAttention-style kernel shipped; with no flag set it must pass
// attention/matchesReference (tests/planted_bugs_test.cpp checks that).
//
// fp32 forward only: P is rounded to the dtype before P.V and O after it, as the
// kernels do; gradients of backward problems come from the float64 reference
// (every flag is a forward bug). Like the kernels it reads only the compacted
// metadata and applies the index rule, so it declares non-representable inputs
// unsupported (docs/semantics.md#the-kernels-index-rule-and-representability).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::planted {

// Tile shape: 4 query rows (so kv_tile_range joins several rows' intervals) by 2
// keys (so a 3-key document already has a partial kv tile and two tiles for the
// running max to move between). Measured over seeds 1..40 of planted_bugs_test:
// with 4 x 4 tiles rescale_skipped shrank to T = 5..11 (once past the T <= 8 the
// test demands), with 4 x 2 to T = 3..8, 28 of 40 at T <= 4.
inline constexpr int kPlantedTileQ = 4;
inline constexpr int kPlantedTileKv = 2;

struct TiledBugs {
  // Keys a kv tile (0: kPlantedTileKv); the kernels' 64 for a bug at their tile edges.
  int kv_tile = 0;
  // The accumulated output is not multiplied by exp(m_old - m_new) when the
  // running max moves (the denominator still is).
  bool rescale_skipped = false;
  // The same, only in a kv tile that holds one key at head_dim >= 64: the wide
  // path's remainder loop for a partial last tile (a document of 65 or 129 keys
  // under 64-key tiles) folds its key in without the rescale.
  bool rescale_skipped_in_one_key_tile = false;
  // The kv tile loop stops at lkv / tile (rounded down): the last partial kv tile
  // of a document is never visited.
  bool last_partial_kv_tile_skipped = false;
  // Bottom-right diagonal offset from the row's valid token counts (every
  // document of the row) instead of the document's own lq, lkv.
  bool bottom_right_anchored_at_row = false;
  // > 0: only a document's first `keys_kept` keys are visited (a K/V staging
  // buffer of fixed size; every key past it silently dropped).
  int64_t keys_kept = 0;
  // head_dim >= 64: the upper half of each output row is never stored (the
  // wide-head path splits D over two warps and the second one's store is lost).
  bool wide_head_upper_half_unstored = false;
  // 16-bit outputs truncated (rounded towards zero) instead of rounded to
  // nearest even: at most one ulp off, inside every tolerance budget.
  bool outputs_truncated = false;
  // Query heads packed 4 to a tile (the widest GQA group the packed path was
  // written for); a wider group spills into further packs, and a pack reads kv
  // head pack % Hkv instead of pack / (group / 4). Groups up to 4 and MQA map
  // right; 8 query heads on each of 2 kv heads read the wrong one.
  bool wide_gqa_group_packed = false;
};

// The tiled forward; an invalid problem gives the reference's error.
Expected<AttentionResult> tiled_attention(const AttentionProblem& problem, const AttentionInputs& inputs,
                                          const TiledBugs& bugs);

// A backend running tiled_attention with `bugs` (none: the correct tiled forward).
std::unique_ptr<Backend> tiled_backend(std::string name, TiledBugs bugs);

}  // namespace attn_oracle::planted
