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
#include "attn_oracle/cases/document_sizes.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/seam/input_domain.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/properties/draw_settings.hpp"

namespace attn_oracle {

// ------------------------------------------------------------------- specs
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

// ------------------------------------------------------------------- size profile
// SizeProfile and DrawSettings: draw_settings.hpp.
inline constexpr int kDeepMaxLen = 4100;

// The kernel-tile mode's sizes: a document side of up to kLongDocMax tokens
// (uniform in 1..4096, or at the edges where kernels' tiles and key splits end:
// 255..257, 352, 353, 511..513, 1023..1025, 2047..2049, 4095, 4096), rows up to
// kLongRowMax tokens (BatchOptions::long_row_len), B up to 2 and no extra dims
// (B = 1 for mask kinds without padding, where a short row would grow its last
// document to the longest row). kLongDocMin, kLongDocMax, kLongRowMax: document_sizes.hpp.
// What one draw may cost: pairs over every document and rows x Tq x Tkv
// (kernel-tile draws: BatchSpec::max_pairs, max_cells); pairs x heads_q x
// (head_dim + kPairOverhead) (work) where a document has kLongDocMin tokens or more; for every
// attention draw rows x T x heads_q x head_dim (elements of a tensor) and
// rows x Tq x Tkv x heads_q (cells: every score of a backend that holds them,
// as a dense-mask path does). attention_draw takes kv heads, then the group,
// then head_dim down to fit (short draws never need it). Release: 2^19 pairs,
// 2^25 work, 2^21 elements, 2^26 cells (a document of 4096 keys beside 128
// queries, or 724 on both sides; a batch of 2^25 cells, a 16k row beside a 2k
// one, so that two query heads fit). Under
// AddressSanitizer, where a pair costs about 20 times as much
// (scripts/sanitize), a sixteenth of the pairs and work; 4 times all of it in
// the deep profile.
struct KernelTileBudget {
  int64_t pairs = 0, work = 0, elements = 0, cells = 0;
};
// Work counts pairs x heads_q x (head_dim + kPairOverhead): a pair costs its
// softmax (an exp, the masking, the row sums) besides its head_dim products.
inline constexpr int64_t kPairOverhead = 16;
KernelTileBudget kernel_tile_budget(SizeProfile profile);

// ------------------------------------------------------------------- valid inputs
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
// A batch with exactly one violation, tagged with the code it must produce.
struct InvalidBatch {
  PackedBatch batch;
  ErrorCode expected;
};
// Drawn inside the domain's shape fields (input_domain.hpp): the base batch
// within the domain, the violations the domain's calls can carry, planted into
// both sides of a self-attention batch.
rc::Gen<InvalidBatch> invalid_batch(const InputDomain& domain = {}, SizeProfile profile = SizeProfile::ci);

// ------------------------------------------------------------------- attention
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
enum class QueryAt { first_key, after_keys, last_key, explicit_pos };

struct SmallSeqDocSpec {
  int keys = 1;                // 1..16; 0 or > 16 only in invalid draws
  int queries = 1;             // 1; 2 only in invalid draws
  int q_gap = 0, kv_gap = 0;   // padding tokens before it (padding kinds)
  int id_step = 1;             // id = previous id + id_step (>= 1)
  int kv_start = 0;            // position of the first key
  QueryAt query_at = QueryAt::after_keys;
  int query_pos = 0;           // QueryAt::explicit_pos
};

struct SmallSeqSpec {
  MaskKind mask = MaskKind::padding;
  Window window;
  int kv_stride = 1;                    // key positions kv_start + kv_stride * j
  bool all_at_first_key = false;        // every query at QueryAt::first_key (representable)
  int q_trailing = 0, kv_trailing = 0;  // padding after the last document (padding kinds)
  std::vector<std::vector<SmallSeqDocSpec>> rows;
};

// Padding kinds pad rows to one length; non-padding kinds keep the first n
// documents of every row (n = the fewest in a row) and fill short kv rows with a
// kv-only document (ignored by small-seq: it has no query). M = the highest id.
PackedBatch build_small_seq_batch(const SmallSeqSpec& spec);

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
// Heads as attention_draw (heads_kv 1..2, group {1, 2, 4, 8}, head dims mostly
// {1, 2, 4, 8}, sometimes 64), every mask kind, windows sometimes.
rc::Gen<AttentionDraw> small_seq_draw(SmallSeqOptions options = {});

// A small-seq problem with exactly one violation, tagged with its code: two
// queries in a document or a document with 0 or 17+ keys (small_seq_query_count,
// small_seq_key_count), or heads_q % heads_kv != 0 (bad_heads). Padding kinds.
struct InvalidSmallSeq {
  AttentionDraw draw;
  ErrorCode expected;
};
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
