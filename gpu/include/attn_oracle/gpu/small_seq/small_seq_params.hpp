// small_seq_params.hpp: parameters of the small-sequence kernels
// (docs/semantics.md#8-small-sequence-problems) and their CPU twin. Tensors are THD as for the
// fused kernels (token t = row * T + position-in-row, gaps allowed), but documents are the raw
// runs of small_seq.hpp, not the trimmed metadata runs: document d has one query
// token q_token[d] and keys[d] (1..16) kv tokens first_key[d], first_key[d] + 1, ...
// The mask is docs/semantics.md#2-the-attention-mask on positions (small_seq_rows.hpp), so the
// kernels read the query's position and the kv positions. Plain C++17: nvcc compiles it as is.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/attention/attention_params.hpp"  // AttnDtype

namespace attn_oracle::gpu {

inline constexpr int kSmallSeqSlots = 16;  // P slots per (document, query head) = the key bound

struct SmallSeqParams {
  const void* q = nullptr;  // [total_q, heads_q, head_dim], dtype
  const void* k = nullptr;  // [total_kv, heads_kv, head_dim], dtype
  const void* v = nullptr;  // [total_kv, heads_kv, head_dim], dtype
  void* o = nullptr;        // [total_q, heads_q, head_dim], dtype; tokens of no document 0
  float* p = nullptr;       // [docs, heads_q, 16] fp32: forward writes, backward reads

  const void* d_o = nullptr;  // [total_q, heads_q, head_dim], dtype; backward only
  void* dq = nullptr;         // [total_q, heads_q, head_dim], dtype
  void* dk = nullptr;         // [total_kv, heads_kv, head_dim], dtype; keys of no document 0
  void* dv = nullptr;         // [total_kv, heads_kv, head_dim], dtype

  const int64_t* q_token = nullptr;    // [docs] THD token of the document's query
  const int64_t* first_key = nullptr;  // [docs] THD token of its first key
  const int32_t* keys = nullptr;       // [docs] 1..16
  const int64_t* q_pos = nullptr;      // [docs] segment_pos of the query
  const int64_t* kv_pos = nullptr;     // [total_kv] segment_pos of every kv token (rows broadcast)

  int64_t docs = 0;
  int64_t total_q = 0, total_kv = 0;
  int heads_q = 1, heads_kv = 1, head_dim = 0;
  float scale = 1.0f;
  int mask = 0;                                 // MaskCode (mask_rule.hpp)
  int64_t window_left = -1, window_right = -1;  // negative = unbounded; bottom-right ignores right
  int dtype = kBf16;
};

}  // namespace attn_oracle::gpu
