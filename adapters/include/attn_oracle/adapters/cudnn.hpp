// cudnn.hpp: cuDNN SDPA's ragged (THD) conventions, as the cuDNN frontend's
// SDPA attributes spell them, to and from our packed-batch model.
// docs/conventions.md has the table and a worked example.
//
// What is easy to get wrong:
//  - cuDNN's "batch" entry b is one of our documents: seq_len_q[b] valid q
//    tokens starting at ragged_offset_q[b] (in elements: tokens x H x D for its
//    own tensors; here elements_per_token says which), gaps allowed.
//  - The band: for row r and column c of one sequence, with shift = s_kv - s_q
//    under BOTTOM_RIGHT alignment and 0 under TOP_LEFT,
//      right bound R keeps c <= r + shift + R   (inclusive; R = 0 is causal)
//      left bound L keeps  c >  r + shift - L   (EXCLUSIVE)
//    so cuDNN's left bound is our window left + 1 (L = 1 keeps the diagonal
//    alone). set_causal_mask() is TOP_LEFT with R = 0 (our causal),
//    set_causal_mask_bottom_right() BOTTOM_RIGHT with R = 0 (causal_bottom_right).
//  - Ragged offsets imply the padding mask (seq_len tensors): the way in gives
//    a padding kind when a token lies outside every sequence.
//  - seq_len tensors and the bounds are int32.
//
// Checked by tests/adapters_test.cpp and by the cuDNN-convention mock kernel
// in tests/planted/convention_mocks.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::adapters::cudnn {

enum class DiagonalAlignment { top_left, bottom_right };

struct SdpaRaggedParams {
  std::vector<int64_t> seq_len_q;         // [B] (cuDNN: [B, 1, 1, 1] int32)
  std::vector<int64_t> seq_len_kv;        // [B]
  std::vector<int64_t> ragged_offset_q;   // [B + 1] first element of sequence b; last = the tensor's end
  std::vector<int64_t> ragged_offset_kv;  // [B + 1]
  int64_t q_elements_per_token = 1;       // Hq * D for cuDNN's own offsets; 1 reads them in tokens
  int64_t kv_elements_per_token = 1;      // Hkv * D, or 1
  DiagonalAlignment alignment = DiagonalAlignment::top_left;
  std::optional<int64_t> left_bound;   // set_diagonal_band_left_bound: >= 1, EXCLUSIVE
  std::optional<int64_t> right_bound;  // set_diagonal_band_right_bound: >= 0, inclusive
  bool operator==(const SdpaRaggedParams&) const = default;
};

// cuDNN's sequences as one row of our model: sequence b is document b + 1
// (M = B), its q tokens [ragged_offset_q[b], + seq_len_q[b]) in token units,
// positions 0.. (the tensor's tokens outside every sequence are padding).
//  - right bound 0: causal (TOP_LEFT) or causal_bottom_right, window (L - 1, -1);
//  - no bound: no_mask;
//  - other bounds: no_mask with window (L - 1, R), positions 0.. under TOP_LEFT;
//    under BOTTOM_RIGHT each sequence's positions start at max(0, s_kv - s_q)
//    (q) and max(0, s_q - s_kv) (kv).
// Errors: bad_metadata (sizes, an element offset not a multiple of
// elements_per_token, offsets that decrease, a sequence past the next one's
// start, a negative length or one past int32), bad_window (L < 1, R < 0, past int32).
Expected<PackedBatch> to_packed_batch(const SdpaRaggedParams& params);

// Our batch as a cuDNN ragged SDPA call on our own tensors ([R, T, H, D] read
// as THD): one sequence per document with valid tokens, trimmed to them, rows
// in row-major order; offsets scaled by elements_per_token. The alignment is
// the mask kind's; when that band differs from ours on some document the other
// alignment is tried. Errors: the model's validation codes; `unsupported` when
// neither band attends as ours does (the message names the row, document and
// first query that differs), when positions inside a document are not
// contiguous under a causal term or a window, or when a length passes int32.
Expected<SdpaRaggedParams> to_cudnn(const PackedBatch& batch, int64_t q_elements_per_token = 1,
                                    int64_t kv_elements_per_token = 1);

}  // namespace attn_oracle::adapters::cudnn
