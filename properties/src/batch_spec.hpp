// batch_spec.hpp (internal): the small spec packed_batch draws, and its builder.
// A batch is drawn as a spec (per row, a list of documents with their q and kv
// lengths, the padding before them and the id step; a position mode per side;
// the mask, window, extra dims) and build_batch turns it into ids and positions.
// Shrinking acts on the spec, so a failing case shrinks by dropping rows and
// documents and shortening them, and every shrunk value is still a valid batch.
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline properties {

struct DocSpec {
  int q_len = 1, kv_len = 1;  // 0 = the document is missing on that side
  int q_gap = 0, kv_gap = 0;  // padding tokens before it (padding kinds only)
  int id_step = 1;            // id = previous id + id_step (>= 1)
  int q_start = 0, kv_start = 0;  // first position, in offset / striped modes
};

enum class PositionMode { contiguous, offset, striped };

struct SideSpec {
  PositionMode mode = PositionMode::contiguous;
  int stride = 1;               // striped: positions start + stride * i
  bool broadcast_pos = false;   // positions [B, T] shared over extra dims
  Shape extra;                  // extra leading dims of this side
};

struct BatchSpec {
  MaskKind mask = MaskKind::padding;
  Window window;
  int spare_capacity = 0;  // M = highest id used + spare_capacity
  int q_trailing = 0, kv_trailing = 0;  // extra trailing padding (padding kinds)
  // A padding kind drawn without padding tokens: gaps and trailing padding are
  // left out and short rows grow their last document, as non-padding kinds do.
  bool no_padding = false;
  // The highest id a row may hold (0: no limit), from a declared menu of M: a row a
  // side leaves empty is filled with the highest id drawn below it, not a new one.
  int64_t id_cap = 0;
  // > 0 (kernel-tile draws): each document attends at most this many (query,
  // key) pairs over the number of documents, and rows x Tq x Tkv (the scores
  // of one head of a backend that holds them all) is at most max_cells; the q
  // side, or both sides when q is kv, is cut to fit (cap_kernel_tile_sizes).
  // Trailing padding keeps each side within max_row_tokens.
  int64_t max_pairs = 0, max_cells = 0, max_row_tokens = 0;
  SideSpec q, kv;
  // One list of rows per broadcast slice: slices[s][b] is row b of slice s.
  std::vector<std::vector<std::vector<DocSpec>>> slices;
};

PackedBatch build_batch(const BatchSpec& spec);
// The spec inside spec.max_pairs, max_cells and max_row_tokens (unchanged when
// 0): trailing padding cut to the row length, each document's q side cut to
// its share of the pairs, then the q side's padding dropped and its longest
// document halved until the cells fit.
BatchSpec cap_kernel_tile_sizes(BatchSpec spec, bool q_is_kv);

}  // namespace attn_oracle::properties
