// generator_types.hpp: what the generators of generators.hpp take and return:
// the options of each draw, the budget kernel-tile draws stay inside, and the
// drawn values that carry more than a batch.
#pragma once

#include <cstdint>

#include "attn_oracle/cases/document_sizes.hpp"
#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/properties/draw_settings.hpp"
#include "attn_oracle/seam/input_domain.hpp"

namespace attn_oracle::inline properties {

// ------------------------------------------------------------------- sizes
// SizeProfile and DrawSettings: draw_settings.hpp. The deep profile's rows.
inline constexpr int kDeepMaxLen = 4100;

// What one kernel-tile draw may cost: pairs over every document and rows x Tq
// x Tkv (BatchSpec::max_pairs, max_cells); pairs x heads_q x (head_dim +
// kPairOverhead) (work) where a document has kLongDocMin tokens or more; for
// every attention draw rows x T x heads_q x head_dim (elements of a tensor) and
// rows x Tq x Tkv x heads_q (cells: every score of a backend that holds them,
// as a dense-mask path does). attention_draw takes kv heads, then the group,
// then head_dim down to fit (short draws never need it). Release: 2^19 pairs,
// 2^25 work, 2^21 elements, 2^26 cells (a document of 4096 keys beside 128
// queries, or 724 on both sides; a batch of 2^25 cells, a 16k row beside a 2k
// one, so that two query heads fit). Under AddressSanitizer, where a pair
// costs about 20 times as much (scripts/sanitize), a sixteenth of the pairs
// and work; 4 times all of it in the deep profile.
struct KernelTileBudget {
  int64_t pairs = 0, work = 0, elements = 0, cells = 0;
};
// Work counts pairs x heads_q x (head_dim + kPairOverhead): a pair costs its
// softmax (an exp, the masking, the row sums) besides its head_dim products.
inline constexpr int64_t kPairOverhead = 16;

// ------------------------------------------------------------------- packed batches
struct BatchOptions {
  int max_rows = 4;        // B in 1..max_rows
  int max_docs = 6;        // ids per row <= max_docs - 1, plus a filler document: M in 1..6
  int max_len = 64;        // T per side
  bool extra_dims = true;  // draw extra leading dims
  bool any_mask = true;    // all six kinds; false: padding kinds only
  // Positions from 0 in every document (always representable,
  // docs/semantics.md#the-kernels-index-rule-and-representability): for properties that compare a
  // kernel with itself on two masks.
  bool contiguous_positions = false;
  int tile_edge_weight = 1;  // how often (of 21 + this + kernel_tile_weight) a batch draws tile-edge lengths
  // How often a batch is drawn in the kernel-tile mode (0: never), and its rows' longest side.
  int kernel_tile_weight = 0;
  int long_row_len = kLongRowMax;
  // The backend's domain (input_domain.hpp): batches are drawn inside it (q
  // drawn and copied to kv for self-attention; no gaps or trailing padding;
  // positions from 0; rows, extra dims, mask kinds and windows it takes), and
  // attention_draw takes its dtypes and head dims.
  InputDomain domain = {};
  SizeProfile profile = SizeProfile::ci;  // deep: longer rows, more documents, tile edges more often
};

// A batch with exactly one violation, tagged with the code it must produce.
struct InvalidBatch {
  PackedBatch batch;
  ErrorCode expected;
};

// ------------------------------------------------------------------- attention problems
struct AttentionDraw {
  AttentionProblem problem;
  uint64_t seed = 0;  // generate_inputs(problem, seed)
};

// Heads: heads_kv in 1..2, heads_q = heads_kv x group, group in {1, 2, 4, 8}
// ({2, 4, 8} with `gqa`: Llama-3 70B's 8 query heads a kv head). Head dims
// mostly {1, 2, 4, 8}, 4 draws in 14 the kernels' 64, 128 or 256; a domain with
// head dims draws among those. Dtypes among the domain's. At most 2 rows;
// documents mostly short, 5 batches in 29 in the tile-edge mode (sides of
// 63..65 and 127..129 tokens: a kernel that drops keys past a tile or a buffer
// shows there) and 3 in 29 in the kernel-tile mode (documents of 256..4096
// tokens in rows of up to 16384: past one, two and many of the kernels' 64- to
// 256-row query tiles and 64- to 176-key tiles, and past the 1k-token key
// splits), heads and head_dim taken down to the work budget there.
struct AttentionOptions {
  BatchOptions batch{.max_rows = 2, .max_docs = 4, .max_len = 140, .extra_dims = false, .tile_edge_weight = 5,
                     .kernel_tile_weight = 3};
  bool backward = true;
  bool low_precision = true;  // draw fp16 / bf16 as well as fp32
  bool gqa = false;           // heads_q > heads_kv always (GQA, or MQA when heads_kv = 1)
};

// ------------------------------------------------------------------- small-seq problems
struct SmallSeqOptions {
  int max_rows = 3;           // B in 1..3
  int max_docs = 6;           // documents per row
  bool backward = true;
  bool low_precision = true;  // fp16 / bf16 as well as fp32
  // The backend's domain: its mask kinds (non-padding ones for no padding),
  // rows, windows, dtypes and head dims; positions from 0 put every query at
  // its document's first key, position 0. Self-attention it cannot take.
  InputDomain domain = {};
};

// A small-seq problem with exactly one violation, tagged with its code.
struct InvalidSmallSeq {
  AttentionDraw draw;
  ErrorCode expected;
};

}  // namespace attn_oracle::properties
