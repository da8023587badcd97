// kv_buffer_params.hpp: parameters of the shared K/V buffer kernels and their
// CPU twin (docs/semantics.md#3-metadata): the per-micro-sequence preprocessing, the slice
// write and the gradient accumulation. Plain C++17: nvcc compiles it as is.
// Element pointers are templates: the twin runs on the seam's doubles, the
// kernels on float (the buffer and its gradient are fp32 on the device).
#pragma once

#include <cstdint>

namespace attn_oracle::gpu {

// Preprocessing of micro-sequence `index`, O(tokens): one work item per kv token
// of [fdb, end) and one per document boundary.
struct KvPlanParams {
  const int64_t* doc_starts = nullptr;      // [docs + 1], prefix sums of the lengths; last = tokens
  const int64_t* token_document = nullptr;  // [tokens], 0-based document of every token
  int64_t tokens = 0, docs = 0;             // N, documents of the whole sequence
  int64_t micro_seq_tokens = 1;             // m
  int64_t index = 0;                        // micro-sequence i

  int64_t* cu_seqlens_q = nullptr;  // [S + 1], 0 .. end - begin
  int64_t* cu_seqlens_k = nullptr;  // [S + 1], 0 .. end - fdb
  int64_t* q_document = nullptr;    // [end - begin], 1..S
  int64_t* q_position = nullptr;    // [end - begin], position inside the document
  int64_t* kv_document = nullptr;   // [end - fdb], 1..S
  int64_t* kv_position = nullptr;   // [end - fdb]
};

// Micro-sequence i's slice into the buffer: rows [begin, begin + len).
template <class T>
struct KvSliceParams {
  const T* slice = nullptr;  // [len, 2, heads_kv, head_dim]
  T* buffer = nullptr;       // [tokens, 2, heads_kv, head_dim]
  int64_t begin = 0, len = 0, tokens = 0;
  int64_t row = 0;           // 2 * heads_kv * head_dim
};

// A micro-sequence's dK, dV over the narrowed range added into the gradient
// buffer rows [first, first + len); nothing before `first` is touched.
template <class T>
struct KvGradParams {
  const T* dk = nullptr;  // [len, heads_kv, head_dim]
  const T* dv = nullptr;  // [len, heads_kv, head_dim]
  T* grad = nullptr;      // [tokens, 2, heads_kv, head_dim]
  int64_t first = 0, len = 0, tokens = 0;
  int64_t row_kv = 0;     // heads_kv * head_dim
};

}  // namespace attn_oracle::gpu
