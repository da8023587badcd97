// metadata_params.hpp: the parameters of the O(T) metadata algorithm, one struct
// for the CUDA kernels and the CPU twin. Flat row r runs over the broadcast extra
// dims x B (row-major); each side finds its own ids row and positions row by
// index arithmetic over per-dim strides (0 on a broadcast dim), never by copying.
#pragma once

#include <cstdint>

namespace attn_oracle::gpu {

inline constexpr int kMaxExtraDims = 8;

struct SideParams {
  const int64_t* ids = nullptr;  // [side_rows, len]; side_rows = prod(side extra) * B
  const int64_t* pos = nullptr;  // [pos_rows, len]; positions broadcast over the leading rows
  int64_t len = 0;               // T of this side
  int64_t pos_rows = 1;          // rows of the positions array (a trailing suffix of the ids)
  int64_t extra_stride[kMaxExtraDims] = {};  // side-row stride per broadcast extra dim, 0 = broadcast
};

// Per (row, side, slot) aggregate of one document's run: enough to trim it.
struct DocRun {
  int64_t first = -1;  // first token of the run, -1 when the document is absent
  int64_t last = -1;   // last token of the run
};

// The first violation found in a row, as the reference orders them.
struct RowError {
  int code = -1;        // attn_oracle::ErrorCode, -1 when the row is valid
  int side = 0;         // 0 = q, 1 = kv
  int64_t token = 0;    // offending token
  int64_t value = 0;    // offending id or position
  int64_t other = 0;    // the value it was compared with (previous id / position, M)
};

struct MetadataParams {
  SideParams q, kv;
  int64_t rows = 0;          // prod(broadcast extra) * B
  int64_t batch = 0;         // B
  int64_t max_segments = 0;  // M
  int mask = 0;              // attn_oracle::MaskKind
  int extra_rank = 0;
  int64_t extra_shape[kMaxExtraDims] = {};  // broadcast extra dims

  // Per-row outputs.
  int64_t* q_seqlens = nullptr;   // [rows, M]
  int64_t* kv_seqlens = nullptr;  // [rows, M]
  int64_t* q_offsets = nullptr;   // [rows, M + 1]
  int64_t* kv_offsets = nullptr;  // [rows, M + 1]
  RowError* errors = nullptr;     // [rows]
  int64_t* row_docs = nullptr;    // [rows] documents with valid tokens
  int64_t* row_q_tokens = nullptr;   // [rows] valid q tokens
  int64_t* row_kv_tokens = nullptr;  // [rows] valid kv tokens

  // Scratch.
  DocRun* q_runs = nullptr;       // [rows or 1, M]
  DocRun* kv_runs = nullptr;      // [rows or 1, M]
  int32_t* seen_large = nullptr;  // [rows or 1, large_capacity] run starts of ids > M
  int64_t large_capacity = 0;     // power of two >= 2 * max(Tq, Tkv)
};

// Exclusive prefix sums over rows, consumed by the compaction.
struct CompactionParams {
  const int64_t* q_offsets = nullptr;    // [rows, M + 1]
  const int64_t* q_seqlens = nullptr;    // [rows, M]
  const int64_t* kv_offsets = nullptr;   // [rows, M + 1]
  const int64_t* kv_seqlens = nullptr;   // [rows, M]
  const int64_t* doc_base = nullptr;     // [rows] documents before row r
  const int64_t* q_token_base = nullptr; // [rows] valid q tokens before row r
  const int64_t* kv_token_base = nullptr;
  int64_t rows = 0, max_segments = 0, q_len = 0, kv_len = 0, documents = 0;
  int64_t* cu_seqlens_q = nullptr;       // [documents + 1]
  int64_t* cu_seqlens_kv = nullptr;      // [documents + 1]
  int64_t* ragged_offsets_q = nullptr;   // [documents + 1]
  int64_t* ragged_offsets_kv = nullptr;  // [documents + 1]
};

}  // namespace attn_oracle::gpu
