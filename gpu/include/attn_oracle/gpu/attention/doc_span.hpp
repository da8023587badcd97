// doc_span.hpp: one document's runs in the THD tensors, read once from the
// compacted metadata (FlashAttention calls this block info).
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

struct DocSpan {
  int64_t q0 = 0, lq = 0;    // first q token in the THD tensor, number of q tokens
  int64_t kv0 = 0, lkv = 0;  // same for kv
};

ATTN_HD DocSpan doc_span(const AttentionFwdParams& p, int64_t doc) {
  return DocSpan{p.ragged_offsets_q[doc], p.cu_seqlens_q[doc + 1] - p.cu_seqlens_q[doc],
                 p.ragged_offsets_kv[doc], p.cu_seqlens_kv[doc + 1] - p.cu_seqlens_kv[doc]};
}

// Query head h reads kv head h / (heads_q / heads_kv) (GQA / MQA).
ATTN_HD int kv_head_of(int h, int heads_q, int heads_kv) { return h / (heads_q / heads_kv); }

// A kernel block's work over a flattened (document, tile) grid.
struct TileItem {
  int64_t doc, tile;  // document, tile index inside it
};

// Block `t` of the flattened grid: the document d with prefix[d] <= t < prefix[d + 1]
// (prefix[docs] = total tiles; documents without tiles repeat a prefix value). A
// grid of max-tiles-per-document blocks would idle most of itself when lengths
// vary (a 512-token document beside an 8k one would use 32 of its 512 blocks).
ATTN_HD TileItem locate_tile(const int64_t* prefix, int64_t docs, int64_t t) {
  int64_t lo = 0, hi = docs;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (prefix[mid] <= t) lo = mid;
    else hi = mid;
  }
  return TileItem{lo, t - prefix[lo]};
}

}  // namespace attn_oracle::gpu
