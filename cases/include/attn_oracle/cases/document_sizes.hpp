// document_sizes.hpp: how large a packed batch's documents are, apart from the
// generators (which use it to keep a draw inside its budget) so that code
// without RapidCheck (the coverage tally of case_op.cpp, linked into the
// Python extension) can ask too.
#pragma once

#include <cstdint>

#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline cases {

// Over the documents of every row (the tokens of one id on each side): the
// sum of Lq x Lkv, the (query, key) pairs any mask kind may attend and what the
// float64 references' work grows with, and the longest side. Zeros for a batch
// whose shapes do not validate.
struct DocumentSizes {
  int64_t pairs = 0, longest = 0;
  // Documents with queries whose keys end one key into a kernel's kv tile
  // (kTileEdgeKeys: 65, 129, ... keys), where a running maximum that rises in
  // that last tile must rescale everything the earlier tiles accumulated.
  int64_t one_key_past_a_tile = 0;
};
inline constexpr int64_t kTileEdgeKeys = 64;
DocumentSizes document_sizes(const PackedBatch& batch);

// Where GPU kernels tile past one tile of rows or keys: a document side of
// kLongDocMin tokens or more (the generators' kernel-tile mode draws up to
// kLongDocMax a side in rows of up to kLongRowMax, generators.hpp).
inline constexpr int kLongDocMin = 256, kLongDocMax = 4096, kLongRowMax = 16384;

}  // namespace attn_oracle::cases
