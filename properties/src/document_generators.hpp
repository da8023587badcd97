// document_generators.hpp (internal): the draws of a batch's rows of documents
// (document_generators.cpp), which packed_batch (packed_batch_generators.cpp)
// puts under a mask, positions and extra dims.
#pragma once

#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/properties/generator_types.hpp"
#include "batch_spec.hpp"

namespace attn_oracle::inline properties {

// How a batch's document lengths are drawn: the edge modes where packing and
// kernels break, beside `normal`.
enum class EdgeMode { normal, all_full, unit_docs, empty_row, exactly_m, one_side, long_docs, tile_edges, kernel_tiles };

// Trailing padding drawn after the rows are fitted: rows keep room for it.
inline constexpr int kMaxTrailing = 3;

// An edge mode, `normal` 10 times in 21 + tile_edge_weight; shrinks towards normal.
rc::Gen<EdgeMode> edge_mode(int tile_edge_weight);
// Whether a batch is drawn in the kernel-tile mode, `weight` in 21 + tile_edge_weight + weight; shrinks towards no.
rc::Gen<bool> kernel_tile_mode(int tile_edge_weight, int weight);
// One row of documents that fit o.max_len and o.max_docs; shrinks towards one document of 1 token a side.
rc::Gen<std::vector<DocSpec>> row_spec(EdgeMode mode, bool padding, BatchOptions o);

}  // namespace attn_oracle::properties
