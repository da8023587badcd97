// generators.hpp: the RapidCheck generators of packed inputs (docs/semantics.md#1-inputs to
// docs/semantics.md#5-attention-outputs-and-gradients), one line each on what it draws and what it
// shrinks towards. The options they take and the values they return: generator_types.hpp; how each
// draws: the file named in its group. Other problem kinds draw in kv_buffer_generators.hpp,
// sharding_generators.hpp and context_parallel_generators.hpp.
//
// A batch is drawn as a small spec and then built (properties/src/batch_spec.hpp), so that shrinking
// drops rows and documents and shortens them while every shrunk value is still valid. Edge modes
// weight in where packing and kernels break (all documents full, length-1 documents, an empty row,
// exactly M documents, a document on one side only, tile edges) and, where opted in, the
// kernel-tile mode: documents of 256..4096 tokens in rows of up to 16k, inside kernel_tile_budget
// (document_generators.cpp).
//
// Checked by tests/generators_test.cpp: every valid draw passes validation, and
// every invalid draw produces exactly its tagged code on the reference.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/properties/generator_types.hpp"

namespace attn_oracle::inline properties {

// ------------------------------------------------------------------- packed batches
// batch_spec.cpp, document_generators.cpp, packed_batch_generators.cpp.

// A valid batch inside options.domain; shrinks towards one row of one 1-token document, no padding or window.
rc::Gen<PackedBatch> packed_batch(BatchOptions options = {});
// The domain's mask kinds (padding kinds only when !any_mask); empty when the two exclude each other.
std::vector<MaskKind> drawable_masks(const BatchOptions& options);
// Options with the backend's domain, for a property's draw.
BatchOptions within(const InputDomain& domain, BatchOptions options = {});
// What a kernel-tile draw may cost in this profile (a sixteenth of the pairs and work under AddressSanitizer).
KernelTileBudget kernel_tile_budget(SizeProfile profile);

// ------------------------------------------------------------------- attention problems
// attention_generators.cpp.

// A packed_batch with heads, head dim, dtype and seed; shrinks as it does, to the fewest heads, least head dim, fp32.
rc::Gen<AttentionDraw> attention_draw(AttentionOptions options = {});
// The drawn shape, else head_dim 64 in the drawn dtype, bf16 or fp16, whichever `supported` takes first.
AttentionShape nearest_supported_shape(const AttentionProblem& problem,
                                       const std::function<bool(const AttentionProblem&)>& supported);

// ------------------------------------------------------------------- small-seq problems
// small_seq_generators.cpp (docs/semantics.md#8-small-sequence-problems).

// Rows of documents of one query and 1..16 keys; shrinks towards one document of one key, the query at it.
rc::Gen<AttentionDraw> small_seq_draw(SmallSeqOptions options = {});
// A padding-kind small-seq problem with one violation and its code; shrinks towards two queries in a document.
rc::Gen<InvalidSmallSeq> invalid_small_seq();

// ------------------------------------------------------------------- invalid and arbitrary batches
// invalid_generators.cpp, arbitrary_generators.cpp.

// A batch inside the domain with one violation and its code; shrinks towards a bad M on a shrunk packed_batch.
rc::Gen<InvalidBatch> invalid_batch(const InputDomain& domain = {}, SizeProfile profile = SizeProfile::ci);
// Tiny batches of arbitrary ids, positions, M and shapes, valid or not; shrinks towards one row of no tokens.
rc::Gen<PackedBatch> arbitrary_batch(const InputDomain& domain = {});

// ------------------------------------------------------------------- size menu
// size_menu_draws.cpp: shape-stable draws, for backends that compile once per shape.

// The backend's domain, with default_size_menu() folded in under shape-stable draws when it declares none.
InputDomain drawing_domain(InputDomain declared, bool shape_stable);
// The batch grown onto the domain's menu: T, B and M to the next size on it (unchanged without a menu).
PackedBatch on_size_menu(PackedBatch batch, const InputDomain& domain);
// What shape-stable draws draw and what they leave out, for the run's header.
std::string shape_stable_note();
// `otherwise`, capped at the menu's largest T.
int64_t menu_max_tokens(const InputDomain& domain, int64_t otherwise);
// `otherwise`, capped at the menu's largest B.
int64_t menu_max_rows(const InputDomain& domain, int64_t otherwise);
// `otherwise` (BatchOptions::max_docs), capped so that ids stay within the menu's largest M.
int64_t menu_max_docs(const InputDomain& domain, int64_t otherwise);

// ------------------------------------------------------------------- showing
// show.cpp (InvalidSmallSeq: small_seq_generators.cpp): ids, positions and shapes, never the float tensors.
void showValue(const PackedBatch& batch, std::ostream& os);
void showValue(const InvalidBatch& draw, std::ostream& os);
void showValue(const AttentionDraw& draw, std::ostream& os);
void showValue(const InvalidSmallSeq& draw, std::ostream& os);

}  // namespace attn_oracle::properties
