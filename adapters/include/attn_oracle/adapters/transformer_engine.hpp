// transformer_engine.hpp: TransformerEngine's conventions to and from our
// packed-batch model: attn_mask_type names, window_size, THD metadata
// (cu_seqlens and their padded variants) and the JAX path's segment ids and
// positions. docs/conventions.md has the table and a worked example.
//
// What is easy to get wrong:
//  - The six attn_mask_type names are ours, letter for letter (our model was
//    written from TE's JAX path); "arbitrary" (an explicit mask tensor) has no
//    kind and is refused.
//  - window_size is (left, right) with -1 unbounded; causal kinds take
//    (left, 0) in TE and a right side is implied (top-left) or ignored
//    (bottom-right) in ours.
//  - THD: cu_seqlens count valid tokens; cu_seqlens_*_padded give where each
//    document starts in the tensor when documents sit apart (padding between).
//  - A window on a top-left or non-causal kind where a document has different
//    q and kv lengths: where its diagonal sits is not pinned down here for the
//    THD path, so such an input is refused rather than guessed. Bottom-right
//    kinds and equal lengths are exact.
//
// Checked by tests/adapters_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::adapters::transformer_engine {

// "padding_causal_bottom_right" -> MaskKind::padding_causal_bottom_right; bad_mask otherwise.
Expected<MaskKind> mask_kind_from_attn_mask_type(std::string_view attn_mask_type);
std::string_view attn_mask_type(MaskKind kind);

struct WindowSize {
  int64_t left = -1;   // -1 unbounded
  int64_t right = -1;  // -1 unbounded; causal kinds: 0
  bool operator==(const WindowSize&) const = default;
};

// ------------------------------------------------------------------ THD
struct ThdParams {
  std::string attn_mask_type = "padding_causal";
  WindowSize window_size;
  std::vector<int64_t> cu_seqlens_q;          // [B + 1] valid q tokens, running totals from 0 (int32 in TE)
  std::vector<int64_t> cu_seqlens_kv;         // [B + 1]
  std::vector<int64_t> cu_seqlens_q_padded;   // [B + 1] document starts in the q tensor; empty: cu_seqlens_q
  std::vector<int64_t> cu_seqlens_kv_padded;  // [B + 1]; empty: cu_seqlens_kv
  bool operator==(const ThdParams&) const = default;
};

// One row of our model: document b (id b + 1, M = B) holds q tokens
// [q_padded[b], q_padded[b] + q_len[b]), positions 0..; tokens between
// documents are padding, so they need a padding kind (the model's
// padding_with_non_padding_mask otherwise). Errors: bad_mask (an unknown
// name), bad_window (a side below -1), bad_metadata (sizes, not starting at 0,
// decreasing, past int32, a document past the next one's padded start),
// `unsupported` (a window on a top-left or non-causal kind with a document
// whose q and kv lengths differ).
Expected<PackedBatch> to_packed_batch(const ThdParams& params);

// Our batch as THD metadata over our own tensors ([R, T, H, D] read as THD):
// the compacted metadata of docs/semantics.md#3-metadata (documents with valid tokens,
// trimmed to them), padded starts = row * T + start, and a leading document
// with no valid tokens when the first one does not start at token 0. Tokens
// the call leaves out are padding to TE: when there are any, a non-padding
// kind goes out as its padding variant. Errors: the model's codes;
// `unsupported` where TE's index rule would attend differently, for the window
// case above, or for a length past int32.
Expected<ThdParams> to_thd(const PackedBatch& batch);

// ------------------------------------------------------------------ JAX segments
// SequenceDescriptor.from_segment_ids_and_pos: our model word for word.
struct SegmentParams {
  std::string attn_mask_type = "padding_causal";
  WindowSize window_size;
  PackedSide q;  // segment_ids [..., B, Tq], segment_pos a trailing suffix of its shape
  PackedSide kv;
  int64_t max_segments = 1;
  bool operator==(const SegmentParams&) const = default;
};

// Errors: bad_mask, bad_window (a side below -1), the model's validation codes.
Expected<PackedBatch> to_packed_batch(const SegmentParams& params);
Expected<SegmentParams> to_segments(const PackedBatch& batch);

}  // namespace attn_oracle::adapters::transformer_engine
