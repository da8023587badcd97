// torch.hpp: PyTorch's conventions to and from our packed-batch model:
// scaled_dot_product_attention (one document per batch row) and flex
// attention's document mask (documents packed in a row, self-attention).
// docs/conventions.md has the table and worked examples.
//
// What is easy to get wrong:
//  - SDPA's `is_causal=True` is anchored top-left (query i sees keys j <= i,
//    torch.nn.attention.bias.causal_upper_left): our causal. The bottom-right
//    one is `attn_mask=causal_lower_right(L, S)` (j <= i + S - L): our
//    causal_bottom_right. They differ only when L != S.
//  - A query SDPA masks completely gives NaN in PyTorch's math path; ours gives
//    o = 0, lse = -inf (docs/semantics.md#5-attention-outputs-and-gradients). The adapter translates the mask, not
//    that output rule.
//  - Flex's document mask reads global indices: document_id[q] == document_id[kv]
//    and, causal, q_idx >= kv_idx, and with a sliding window
//    q_idx - kv_idx <= left and kv_idx - q_idx <= right. On the same layout
//    for q and kv these are positions inside each document, starting at 0, and
//    every document has as many queries as keys: top-left and bottom-right
//    causal are the same mask there.
//
// Checked by tests/adapters_test.cpp.
#pragma once

#include <cstdint>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::adapters::torch {

// ------------------------------------------------------------------ SDPA
enum class SdpaCausal {
  none,                // no attn_mask, is_causal=False
  is_causal,           // is_causal=True, i.e. causal_upper_left(L, S)
  causal_lower_right,  // attn_mask=causal_lower_right(L, S)
};

struct SdpaParams {
  int64_t batch = 1;   // N (leading batch dims flattened)
  int64_t q_len = 1;   // L: query tokens of every batch row
  int64_t kv_len = 1;  // S: key tokens of every batch row
  SdpaCausal causal = SdpaCausal::none;
  bool operator==(const SdpaParams&) const = default;
};

// N rows of one document each (id 1, M = 1), positions 0..: none -> no_mask,
// is_causal -> causal, causal_lower_right -> causal_bottom_right; no window.
// Errors: bad_metadata (N, L or S below 1).
Expected<PackedBatch> to_packed_batch(const SdpaParams& params);

// Our batch as an SDPA call. Needs [B, T] ids (no extra dims) with every token
// of every row in one document on both sides, and a mask SDPA's flag says
// exactly (a window only where it changes nothing). Errors: the model's
// validation codes; `unsupported` otherwise, naming the row and the reason.
Expected<SdpaParams> to_sdpa(const PackedBatch& batch);

// ------------------------------------------------------------------ flex attention
// The usual document mask_mod: document_id[b, q] == document_id[b, kv] (and
// document_id[b, q] >= 0, -1 marking padding), AND q_idx >= kv_idx when causal,
// AND q_idx - kv_idx <= sliding_window when sliding_window >= 0, AND
// kv_idx - q_idx <= window_right when window_right >= 0.
struct FlexDocumentMask {
  IntArray document_id;        // [B, T]: -1 padding, else 0, 1, ..., one run each, increasing along a row
  bool causal = false;
  int64_t sliding_window = -1;  // the window's left side; -1: none
  int64_t window_right = -1;    // the window's right side; -1: none
  bool operator==(const FlexDocumentMask&) const = default;
};

// The same tokens on both sides: ids document_id + 1 (padding 0, M = the
// largest id), positions counted from 0 in each document; causal -> causal
// (padding_causal with padding), else no_mask (padding); the window is
// (sliding_window, window_right). Errors: rank_mismatch (document_id not
// [B, T]), bad_metadata (a value below -1), bad_window (a window side below
// -1), and the model's codes for ids that are not one increasing run per
// document.
Expected<PackedBatch> to_packed_batch(const FlexDocumentMask& mask);

// Our batch as a flex document mask: self-attention ([B, T] ids equal on both
// sides), positions contiguous in each document, and a mask the document
// mask_mod says exactly: any kind (a bottom-right kind is causal here, every
// document being as long on both sides) with any window (left, right); a
// causal kind keeps its right side, which changes nothing there. Errors: the
// model's validation codes; `unsupported` otherwise (the message names the
// row, document and first query that differs).
Expected<FlexDocumentMask> to_flex_document_mask(const PackedBatch& batch);

}  // namespace attn_oracle::adapters::torch
