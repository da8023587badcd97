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

}  // namespace attn_oracle::gpu
