// flash_attention.hpp: FlashAttention's varlen conventions (flash_attn_varlen_func)
// to and from our packed-batch model. docs/conventions.md has the table and a
// worked example.
//
// What is easy to get wrong:
//  - `causal=True` is anchored at the bottom-right of each document (query i of
//    Lq sees keys up to i + Lk - Lq): our causal_bottom_right, not our causal.
//  - The window is anchored there too, causal or not: query i sees keys
//    [i + Lk - Lq - left, i + Lk - Lq + right].
//  - A window side of -1 means "unbounded" in FA3. In FA2, once the other side
//    is bounded, a -1 side means max_seqlen_k: unbounded on the left, but on the
//    right it drops keys of the first queries of a document with
//    Lq > max_seqlen_k + 1 (and a side >= max_seqlen_k first becomes -1). The
//    way in applies that rule exactly; the way out picks max_seqlen_k (any
//    value >= every length is valid) so that the rule says what we mean, and
//    the comparison refuses what is still left different.
//  - cu_seqlens are int32 and FlashAttention never checks them: here they must
//    start at 0, never decrease, and fit in int32; max_seqlen must bound every
//    length (a smaller one leaves tokens unprocessed).
//  - The packed tensors have no gaps: going out, the adapter names which of our
//    tokens make up FlashAttention's packed q and kv (gather them, scatter the
//    outputs back; tokens left out attend nothing and get o = 0, lse = -inf).
//
// Checked by tests/adapters_test.cpp (hand cases, round trips, refusals, the
// reference's mask against the adapter's) and by the FlashAttention-convention
// mock kernel in tests/planted/convention_mocks.cpp, which passes the attention
// properties through this adapter.
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::adapters::flash_attention {

enum class Version { fa2, fa3 };  // which API's `-1` window rule applies

// The mask-shaping arguments of flash_attn_varlen_func.
struct VarlenParams {
  std::vector<int64_t> cu_seqlens_q;  // [docs + 1] int32 in FlashAttention: 0, then running totals
  std::vector<int64_t> cu_seqlens_k;  // [docs + 1]
  int64_t max_seqlen_q = 0;           // >= every q length
  int64_t max_seqlen_k = 0;           // >= every k length; FA2's -1 window side reads it
  bool causal = false;                // bottom-right per document
  int64_t window_left = -1;           // window_size[0]: -1 or >= 0
  int64_t window_right = -1;          // window_size[1]: -1 or >= 0
  Version version = Version::fa3;
  bool operator==(const VarlenParams&) const = default;
};

// FlashAttention's arguments as one row of our model: document k (ids k + 1,
// M = docs) holds q tokens [cu_seqlens_q[k], cu_seqlens_q[k+1]) and the same
// for kv, so FlashAttention's packed token t is our token t of row 0.
//  - causal, or a window right side of 0: causal_bottom_right, window (left, -1);
//  - no window: no_mask, positions 0.. in each document;
//  - any other window: no_mask with the window, and each document's positions
//    starting at max(0, Lk - Lq) (q) and max(0, Lq - Lk) (kv), which puts the
//    top-left window on FlashAttention's bottom-right diagonal.
// Errors: bad_metadata (cu_seqlens of unequal sizes, fewer than 2 entries, not
// starting at 0, decreasing, past int32; a max_seqlen below a length or past
// int32), bad_window (a side below -1 or past int32).
Expected<PackedBatch> to_packed_batch(const VarlenParams& params);

// What a FlashAttention call needs from one of our batches.
struct VarlenCall {
  VarlenParams params;
  std::vector<int64_t> q_tokens;   // [cu_seqlens_q.back()]: FlashAttention's q token t is our flat token
                                   // q_tokens[t] of [rows * Tq] (the THD view of [R, Tq, H, D])
  std::vector<int64_t> kv_tokens;  // [cu_seqlens_k.back()], likewise into [rows * Tkv]
};

// Our batch as a FlashAttention call: one document per document with valid
// tokens (docs/semantics.md#3-metadata), rows in row-major order, trimmed to its valid
// tokens. Errors: the model's validation codes; `unsupported` when the
// FlashAttention call would attend differently (the message names the row,
// document and first query that differs, e.g. our top-left causal on a
// document with more keys than queries), when positions inside a document are
// not contiguous under a causal term or a window, or when a total passes int32.
Expected<VarlenCall> to_flash_attention(const PackedBatch& batch, Version version);

// A call's forward outputs back in our layout: out [total_q, Hq, D] to o
// [R, Tq, Hq, D], softmax_lse [Hq, total_q] to lse [R, Hq, Tq]. FlashAttention
// writes +inf as the lse of a query that attends nothing (a window can empty
// one); ours is -inf. Tokens the call left out get o = 0, lse = -inf.
AttentionResult outputs_to_ours(const VarlenCall& call, const std::vector<double>& out,
                                const std::vector<double>& softmax_lse, const AttentionSizes& sizes);

}  // namespace attn_oracle::adapters::flash_attention
