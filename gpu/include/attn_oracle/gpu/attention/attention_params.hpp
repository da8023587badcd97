// attention_params.hpp: parameters of the fused varlen attention kernels and
// their CPU twin (docs/semantics.md#5-attention-outputs-and-gradients). Tensors are THD: token t of
// the packed tensor is row * T + position-in-row, documents are addressed through the
// compacted metadata (cu_seqlens for lengths, ragged_offsets for first tokens),
// so gaps between documents are allowed. Plain C++17: nvcc compiles it as is.
#pragma once

#include <cstdint>

namespace attn_oracle::gpu {

enum AttnDtype : int { kFp32 = 0, kFp16 = 1, kBf16 = 2 };  // mirrors attn_oracle::Dtype

struct AttentionFwdParams {
  const void* q = nullptr;  // [total_q, heads_q, head_dim], dtype
  const void* k = nullptr;  // [total_kv, heads_kv, head_dim], dtype
  const void* v = nullptr;  // [total_kv, heads_kv, head_dim], dtype
  void* o = nullptr;        // [total_q, heads_q, head_dim], dtype; uncovered tokens 0
  float* lse = nullptr;     // [heads_q, total_q], natural log; -inf where nothing is attended

  const int64_t* cu_seqlens_q = nullptr;      // [docs + 1], starts at 0
  const int64_t* cu_seqlens_kv = nullptr;     // [docs + 1]
  const int64_t* ragged_offsets_q = nullptr;  // [docs + 1], first token of each document; last = total_q
  const int64_t* ragged_offsets_kv = nullptr; // [docs + 1]; last = total_kv

  int64_t docs = 0;
  int64_t total_q = 0, total_kv = 0;  // tokens of the THD tensors, gaps included
  int heads_q = 1, heads_kv = 1, head_dim = 0;
  float scale = 1.0f;
  int mask = 0;                       // MaskCode (mask_rule.hpp)
  int64_t window_left = -1, window_right = -1;  // negative = unbounded
  int dtype = kFp16;
};

struct AttentionBwdParams : AttentionFwdParams {
  const void* d_o = nullptr;   // [total_q, heads_q, head_dim], dtype
  const float* lse_in = nullptr;  // [heads_q, total_q] from the forward
  const void* o_in = nullptr;  // [total_q, heads_q, head_dim] from the forward
  void* dq = nullptr;          // [total_q, heads_q, head_dim], dtype
  void* dk = nullptr;          // [total_kv, heads_kv, head_dim], dtype
  void* dv = nullptr;          // [total_kv, heads_kv, head_dim], dtype
  float* delta = nullptr;      // [heads_q, total_q] scratch: rowsum(dO * O)
};

}  // namespace attn_oracle::gpu
