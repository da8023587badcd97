// generators.hpp: RapidCheck generators of packed inputs (docs/semantics.md#1-inputs to
// docs/semantics.md#5-attention-outputs-and-gradients).
//
// Layered as RapidCheck's own generators are: a batch is drawn as a small *spec*
// (per row, a list of documents with their q and kv lengths, the padding before
// them and the id step; a position mode per side; the mask, window, extra dims),
// and `build_batch` turns the spec into ids and positions. Shrinking acts on the
// spec, so a failing case shrinks by dropping rows and documents and shortening
// them, and every shrunk value is still a valid batch.
//
// Weighted edge modes: all documents full (no padding, both sides), many
// length-1 documents, an empty row, exactly M documents, a document on one side
// only, documents longer than a 16-token kernel tile, sides at tile edges (63,
// 64, 65, 127, 128, 129; deeper in the deep profile), and where opted in
// (kernel_tile_weight) documents where GPU kernels tile: 256..4096 tokens a
// side in rows of up to 16k, inside a budget of (query, key) pairs, each
// length shrinking towards 1 (a bug past 256 keys shrinks to 257, one that
// needs no length to a few tokens). Position modes: contiguous
// from 0, offset (micro-sequence), striped
// (context parallel). Extra leading dims 0..2 on either side, broadcastable.
//
// Checked by tests/generators_test.cpp: every valid draw passes validation, and
// every invalid draw produces exactly its tagged code on the reference.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string_view>
#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/properties/draw_settings.hpp"
#include "attn_oracle/properties/generator_types.hpp"

namespace attn_oracle {

// ------------------------------------------------------------------- size profile
// SizeProfile and DrawSettings: draw_settings.hpp; kDeepMaxLen, KernelTileBudget and
// kPairOverhead: generator_types.hpp.
//
// The kernel-tile mode's sizes: a document side of up to kLongDocMax tokens
// (uniform in 1..4096, or at the edges where kernels' tiles and key splits end:
// 255..257, 352, 353, 511..513, 1023..1025, 2047..2049, 4095, 4096), rows up to
// kLongRowMax tokens (BatchOptions::long_row_len), B up to 2 and no extra dims
// (B = 1 for mask kinds without padding, where a short row would grow its last
// document to the longest row). kLongDocMin, kLongDocMax, kLongRowMax: document_sizes.hpp.
KernelTileBudget kernel_tile_budget(SizeProfile profile);

// ------------------------------------------------------------------- valid inputs
// The mask kinds a batch may be drawn with: the domain's, of the padding kinds
// only when !any_mask. Empty when the two exclude each other.
std::vector<MaskKind> drawable_masks(const BatchOptions& options);
// Options with the backend's domain, for a property's draw.
BatchOptions within(const InputDomain& domain, BatchOptions options = {});

rc::Gen<PackedBatch> packed_batch(BatchOptions options = {});

// ------------------------------------------------------------------- size menu
// Shape-stable draws (size_menu_draws.cpp) for backends that compile once per
// shape. Under a size menu (input_domain.hpp) packed_batch draws within the
// menu's largest T and B and grows each batch onto the menu: T of each side and
// B to the next size on it (padding tokens where the mask kind and the domain
// allow padding, else each row's last document runs on and new rows are one
// document), M likewise; attention_draw draws the menu's heads. Invalid-input
// draws plant their violation into a batch on the menu (a violation of shape
// takes it off). Left as they are: small_seq, kv_buffer, sharding and
// arbitrary-input draws, whose sizes are their subject. The menu costs coverage, said where it shows: tile-edge sides
// (63, 127, 129) only as padding inside a longer side or grown to the next size,
// no sides without tokens, no extra dims, exactly M documents only for M on the
// menu.
//
// The domain the generators draw in: the backend's, with default_size_menu()
// folded in under shape-stable draws (`check --shape-stable`,
// DrawSettings::shape_stable) when it declares no menu (no extra dims,
// kMenuHeadDims when it lists no head dims). A run computes it once
// (DrawContext, property_runner.hpp).
InputDomain drawing_domain(InputDomain declared, bool shape_stable);
// The batch grown onto the domain's menu (unchanged when it has none).
PackedBatch on_size_menu(PackedBatch batch, const InputDomain& domain);
// What shape-stable draws draw and what they leave out, for the run's header.
std::string shape_stable_note();
// `otherwise`, capped at the menu's largest T or B.
int64_t menu_max_tokens(const InputDomain& domain, int64_t otherwise);
int64_t menu_max_rows(const InputDomain& domain, int64_t otherwise);
// `otherwise` (BatchOptions::max_docs), capped so that ids stay within the menu's largest M.
int64_t menu_max_docs(const InputDomain& domain, int64_t otherwise);

// ------------------------------------------------------------------- invalid inputs
// Drawn inside the domain's shape fields (input_domain.hpp): the base batch
// within the domain, the violations the domain's calls can carry, planted into
// both sides of a self-attention batch.
rc::Gen<InvalidBatch> invalid_batch(const InputDomain& domain = {}, SizeProfile profile = SizeProfile::ci);

// ------------------------------------------------------------------- attention
rc::Gen<AttentionDraw> attention_draw(AttentionOptions options = {});

// The nearest shape a kernel backend supports (kernels take only some head dims
// and the 16-bit dtypes; discarding would make RapidCheck give up): as drawn, then
// head_dim 64 with the drawn dtype, bf16, fp16; the drawn shape when none is.
AttentionShape nearest_supported_shape(const AttentionProblem& problem,
                                       const std::function<bool(const AttentionProblem&)>& supported);

// ------------------------------------------------------------------- small-seq
// Small-seq problems of docs/semantics.md#8-small-sequence-problems (small_seq_generators.cpp): per
// row a list of documents, each with exactly one query token and 1..16 keys, drawn as a
// spec that shrinks by dropping rows and documents and shortening them.
// Positions make decode-like documents common (the query one past its last
// key), else the query at its first key's position (with unit key stride always
// representable: docs/semantics.md#the-kernels-index-rule-and-representability; what a failure
// shrinks towards), at its last key, or at an explicit position.

// Heads as attention_draw (heads_kv 1..2, group {1, 2, 4, 8}, head dims mostly
// {1, 2, 4, 8}, sometimes 64), every mask kind, windows sometimes.
rc::Gen<AttentionDraw> small_seq_draw(SmallSeqOptions options = {});

// A small-seq problem with exactly one violation, tagged with its code: two
// queries in a document or a document with 0 or 17+ keys (small_seq_query_count,
// small_seq_key_count), or heads_q % heads_kv != 0 (bad_heads). Padding kinds.
rc::Gen<InvalidSmallSeq> invalid_small_seq();

// ------------------------------------------------------------------- showing
// Ids, positions and shapes; never the float tensors.
void showValue(const PackedBatch& batch, std::ostream& os);
void showValue(const InvalidBatch& draw, std::ostream& os);
void showValue(const AttentionDraw& draw, std::ostream& os);
void showValue(const InvalidSmallSeq& draw, std::ostream& os);

}  // namespace attn_oracle

namespace attn_oracle {

// Small batches with arbitrary ids, positions, M and shapes (tiny value ranges,
// so that several violations often meet in one input): valid or not, the
// backend must give exactly the reference's answer, precedence included.
// Inside the domain's shape fields: its mask kinds, rows and extra dims, and q
// copied to kv for self-attention.
rc::Gen<PackedBatch> arbitrary_batch(const InputDomain& domain = {});

}  // namespace attn_oracle
