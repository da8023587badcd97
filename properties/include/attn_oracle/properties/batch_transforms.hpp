// batch_transforms.hpp: the input transformations the metamorphic properties
// apply (take one row, take one extra-dims slice, insert padding). Each returns a
// valid batch when given one; exercised by the metadata
// properties that use them (their planted bugs: tests/planted_bugs_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline properties {

enum class Side { q, kv };

// Row b of every slice: the extra dims stay, B becomes 1.
PackedBatch keep_row(const PackedBatch& batch, int64_t b);

// Broadcast slice e (flat over layout.extra) as an unbatched [B, T] batch,
// positions broadcast as docs/semantics.md#1-inputs says.
PackedBatch extra_slice(const PackedBatch& batch, const BatchLayout& layout, int64_t e);

// Inserts `leading[b]` padding tokens before row b (of every slice) of one side
// and pads every row at the end to a common length plus `trailing`.
PackedBatch pad_side(const PackedBatch& batch, Side side, const std::vector<int64_t>& leading,
                     int64_t trailing);

// The padding kind with the same mask on padding-free inputs (causal -> padding_causal, ...).
MaskKind with_padding(MaskKind kind);

// The same batch written with extreme integers that mean the same thing: every
// position of both sides moved up by one amount so that the largest is
// top - margin (INT64_MAX, or the largest position a backend's domain takes;
// masks read differences and run lengths only), and each
// window side replaced by `left_as` / `right_as` where that changes nothing: a
// negative value for an unbounded side; a value above every position span plus
// the longest side for an unbounded side or one already that wide. A
// replacement that would change the mask is not made.
PackedBatch at_extreme_integers(const PackedBatch& batch, int64_t margin, int64_t left_as, int64_t right_as,
                               int64_t top = INT64_MAX);

// Slices of metadata for broadcast row r (flat over extra x B).
std::vector<int64_t> row_slice(const std::vector<int64_t>& per_row, int64_t width, int64_t r);

}  // namespace attn_oracle::properties

namespace attn_oracle::inline properties {

// Documents of every row reordered (their tokens moved together, ids relabelled
// in the new order, padding moved to the end). q_from[t] / kv_from[t] is the old
// flat token index (row * T + t) of new flat token t, or -1 for padding.
struct PermutedBatch {
  PackedBatch batch;
  std::vector<int64_t> q_from, kv_from;
};
// `order_seed` picks the permutation of each row (0 = reversed).
PermutedBatch permute_documents(const PackedBatch& batch, uint64_t order_seed);

// Gathers tokens of a [R*T, width] tensor: out[t] = in[from[t]], 0 where from[t] < 0.
std::vector<double> gather_tokens(const std::vector<double>& in, const std::vector<int64_t>& from,
                                  int64_t width);

}  // namespace attn_oracle::properties
