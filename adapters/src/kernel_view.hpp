// kernel_view.hpp (internal to attn_oracle::adapters): what every convention
// adapter needs from our packed-batch model, and what it needs to build one.
//
// Going out (ours -> theirs): a validated batch read as the kernels read it,
// document by document, each with its *band*: the keys b that query a of its
// run may attend, a + offset - left <= b <= a + offset + right clipped to
// [0, lkv), a negative side unbounded. With positions contiguous inside a
// document every mask kind of docs/semantics.md#2-the-attention-mask is such a band:
//   top-left kinds and no_mask / padding: offset = pos_q0 - pos_kv0
//   bottom-right kinds:                   offset = (Lkv - Lq) + pos_q0 - pos_kv0
//   causal kinds: right = 0 (their right side is implied or ignored).
// An adapter writes down the band its stack would apply to the same document
// and compares the two query by query (first_band_difference): an input the
// stack cannot express is refused there, naming the document and the query,
// never guessed. Positions that are not contiguous make no band and are refused,
// unless the mask is all pairs (no causal term, no window).
//
// Trimmed runs are the document's valid tokens (docs/semantics.md#3-metadata, window
// ignored): a prefix of its queries and a suffix of its keys dropped under a
// causal term. What a kernel call carries (cu_seqlens, ragged offsets); the
// dropped tokens attend nothing and nobody attends them, so leaving them out of
// a call changes no output.
//
// Coming in (theirs -> ours): one_row_batch lays a stack's documents out as one
// row of our model, tokens outside every document as padding.
//
// Checked by tests/adapters_test.cpp through every adapter: round trips, hand
// computed cases, and the reference's explicit mask of a batch against the one
// the adapter's output implies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::adapters::detail {

using Wide = __int128;  // offsets from positions near INT64_MAX and lengths, without wrapping

inline constexpr int64_t kInt32Max = 2147483647;

struct Band {
  Wide offset = 0;
  int64_t left = -1;   // negative: unbounded
  int64_t right = -1;  // negative: unbounded
};

// One document of one broadcast row, on full and on trimmed runs.
struct DocumentView {
  int64_t row = 0, id = 0;
  int64_t q_begin = 0, q_len = 0;    // full run: flat token index into [rows * Tq]
  int64_t kv_begin = 0, kv_len = 0;  // full run: flat token index into [rows * Tkv]
  Band band;                         // ours, on the full runs
  int64_t q_dropped = 0;             // trimmed q run = [q_begin + q_dropped, q_begin + q_len)
  int64_t kv_kept = 0;               // trimmed kv run = [kv_begin, kv_begin + kv_kept)
  int64_t trimmed_q_len() const { return q_len - q_dropped; }  // 0: no valid token (kv_kept is 0 too)
  Band trimmed_band() const { return Band{band.offset + q_dropped, band.left, band.right}; }
};

struct BatchView {
  BatchLayout layout;
  // Documents with tokens on both sides, rows in row-major order, ids
  // increasing; those whose tokens a causal term leaves all invalid included.
  std::vector<DocumentView> documents;
};

// Validates the batch (the model's codes) and reads its documents. `stack` names
// the caller in a refusal (positions that are not contiguous: `unsupported`).
Expected<BatchView> view_batch(const PackedBatch& batch, std::string_view stack);

// The first query a < lq whose clipped key interval differs between `ours` and
// `theirs`, as a sentence naming both intervals; nullopt when they agree.
std::optional<std::string> first_band_difference(const Band& ours, const Band& theirs, int64_t lq, int64_t lkv,
                                                 std::string_view theirs_name);

// "row 0, document 2 (3 q tokens, 5 kv tokens)".
std::string document_name(const DocumentView& doc, int64_t lq, int64_t lkv);

Error refuse(std::string message);                            // unsupported
Error bad_metadata(std::string message);                      // bad_metadata
Error bad_window(std::string message);                        // bad_window

// A stack's document laid out in its own token ranges; positions start at q_pos0 / kv_pos0.
struct LaidOutDocument {
  int64_t q_begin = 0, q_len = 0, kv_begin = 0, kv_len = 0;
  int64_t q_pos0 = 0, kv_pos0 = 0;
};

// One row [1, q_tokens] / [1, kv_tokens]; document k gets id k + 1 (M = docs).
// `mask` is a non-padding kind; its padding variant is used when some token
// lies outside every document.
PackedBatch one_row_batch(const std::vector<LaidOutDocument>& docs, int64_t q_tokens, int64_t kv_tokens,
                          MaskKind mask, Window window);

// Positions that put a bottom-right anchored band at the top-left rule of our
// non-causal kinds: q starts at max(0, Lkv - Lq), kv at max(0, Lq - Lkv).
void anchor_bottom_right(LaidOutDocument& doc);

}  // namespace attn_oracle::adapters::detail
