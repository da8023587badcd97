// metadata_params.hpp: the parameters of the O(T) metadata algorithm, one struct
// for the CUDA kernels and the CPU twin, and how a row is addressed. Flat row r
// runs over the broadcast extra dims x B (row-major); each side finds its own ids
// row and positions row by index arithmetic over per-dim strides (0 on a broadcast
// dim), never by copying (side_row_of, row_ref below).
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

inline constexpr int kMaxExtraDims = 8;

struct SideParams {
  const int64_t* ids = nullptr;  // [side_rows, len]; side_rows = prod(side extra) * B
  const int64_t* pos = nullptr;  // [pos_rows, len]; positions broadcast over the leading rows
  int64_t len = 0;               // T of this side
  int64_t pos_rows = 1;          // rows of the positions array (a trailing suffix of the ids)
  int64_t extra_stride[kMaxExtraDims] = {};  // side-row stride per broadcast extra dim, 0 = broadcast
};

// The per-row error codes; mirrors attn_oracle::ErrorCode (checked by static_asserts
// in prepare_batch.cpp).
enum RowCode : int {
  kNegativeId = 6, kNoncontiguous, kTooManySegments, kIdsOutOfOrder, kPaddingWithNonPaddingMask,
  kPositionsNotIncreasing, kNegativePosition
};

// The first violation found in a row, as the reference orders them.
struct RowError {
  int code = -1;        // a RowCode, -1 when the row is valid
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
};

// The compacted outputs, one entry per document with valid tokens.
struct CompactionParams {
  int64_t* cu_seqlens_q = nullptr;       // [documents + 1]
  int64_t* cu_seqlens_kv = nullptr;      // [documents + 1]
  int64_t* ragged_offsets_q = nullptr;   // [documents + 1]
  int64_t* ragged_offsets_kv = nullptr;  // [documents + 1]
};

// --------------------------------------------------------------- row addressing
// The side row that broadcast row `row` reads: strides over the extra dims, then b.
ATTN_HD int64_t side_row_of(const MetadataParams& p, const SideParams& s, int64_t row) {
  const int64_t b = row % p.batch;
  int64_t rest = row / p.batch, side_row = 0;
  for (int k = p.extra_rank - 1; k >= 0; --k) {
    side_row += (rest % p.extra_shape[k]) * s.extra_stride[k];
    rest /= p.extra_shape[k];
  }
  return side_row * p.batch + b;
}

struct RowRef {
  const int64_t* ids;
  const int64_t* pos;
  int64_t len;
};

ATTN_HD RowRef row_ref(const MetadataParams& p, const SideParams& s, int64_t row) {
  const int64_t r = side_row_of(p, s, row);
  return RowRef{s.ids + r * s.len, s.pos + (r % s.pos_rows) * s.len, s.len};
}

}  // namespace attn_oracle::gpu
