// metadata_row.hpp: the per-row logic of the O(T) metadata algorithm, shared by
// the CUDA kernels (metadata_kernels.cu) and the CPU twin (metadata_twin.cpp).
//
// Per row and side, one left-to-right pass validates
// (docs/semantics.md#input-validation-in-precedence-order, every per-row code, first token per
// code, lowest code wins) and records each document's run [first, last]. Positions strictly
// increase inside a document, so a document's valid tokens are a suffix of its q run and a prefix
// of its kv run, found by binary search against the other side's first / last position:
//   top-left causal:  q valid iff pos_q >= pos_kv[first];  kv valid iff pos_kv <= pos_q[last]
//   bottom-right:     q valid iff pos_q >= (Lq - Lkv) + pos_kv[first]
//                     kv valid iff pos_kv <= (Lkv - Lq) + pos_q[last]
// Time O(T + M log T) per row, memory O(M) per row plus a hash of run starts of
// ids above M (only an invalid row has those; it decides noncontiguous vs
// too_many precedence). No [T, T] intermediate, no per-token one-hot over M.
//
// Checked against the explicit-mask reference by the metadata properties.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"
#include "attn_oracle/gpu/mask_rule.hpp"
#include "attn_oracle/gpu/metadata_params.hpp"

namespace attn_oracle::gpu {

// Mirrors attn_oracle::ErrorCode (checked by static_asserts in the twin).
enum RowCode : int {
  kNegativeId = 6, kNoncontiguous, kTooManySegments, kIdsOutOfOrder, kPaddingWithNonPaddingMask,
  kPositionsNotIncreasing, kNegativePosition
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

// --------------------------------------------------------------- large-id set
// Open addressing over token indices of run starts whose id exceeds M.
ATTN_HD bool seen_before_insert(int32_t* table, int64_t capacity, const int64_t* ids, int64_t t) {
  uint64_t h = static_cast<uint64_t>(ids[t]) * 0x9E3779B97F4A7C15ull;
  for (int64_t probe = 0; probe < capacity; ++probe) {
    int32_t& slot = table[(h + probe) & (capacity - 1)];
    if (slot < 0) {
      slot = static_cast<int32_t>(t);
      return false;
    }
    if (ids[slot] == ids[t]) return true;
  }
  return false;  // unreachable: capacity >= 2 * runs
}

// --------------------------------------------------------------- validation pass
ATTN_HD void note(RowError& e, int code, int side, int64_t t, int64_t value, int64_t other) {
  if (e.code < 0 || code < e.code) e = RowError{code, side, t, value, other};
}

// One pass over one side of a row: the lowest-code violation (first token of
// that code), and each document's run in `runs[id - 1]`.
ATTN_HD RowError scan_side(RowRef row, int side, int64_t M, int mask, DocRun* runs, int32_t* large,
                           int64_t large_capacity) {
  RowError e;
  for (int64_t k = 0; k < M; ++k) runs[k] = DocRun{};
  bool large_used = false;
  int64_t previous_doc = 0;
  for (int64_t t = 0; t < row.len; ++t) {
    const int64_t id = row.ids[t];
    if (id < 0) return RowError{kNegativeId, side, t, id, 0};  // highest per-row precedence
    if (id == 0) {
      if (!mask_allows_padding(mask)) note(e, kPaddingWithNonPaddingMask, side, t, 0, mask);
      continue;
    }
    const bool run_start = t == 0 || row.ids[t - 1] != id;
    if (run_start) {
      bool seen;
      if (id <= M) {
        seen = runs[id - 1].first >= 0;
        if (!seen) runs[id - 1].first = t;
      } else {
        if (!large_used) for (int64_t k = 0; k < large_capacity; ++k) large[k] = -1;
        large_used = true;
        seen = seen_before_insert(large, large_capacity, row.ids, t);
      }
      if (seen) note(e, kNoncontiguous, side, t, id, t > 0 ? row.ids[t - 1] : 0);
      if (id <= previous_doc) note(e, kIdsOutOfOrder, side, t, id, previous_doc);
      previous_doc = id;
    } else if (row.pos[t] <= row.pos[t - 1]) {
      note(e, kPositionsNotIncreasing, side, t, row.pos[t], row.pos[t - 1]);
    }
    if (id > M) note(e, kTooManySegments, side, t, id, M);
    else runs[id - 1].last = t;
    if (row.pos[t] < 0) note(e, kNegativePosition, side, t, row.pos[t], 0);
  }
  return e;
}

// --------------------------------------------------------------- trimming
// First index in [lo, hi] with pos >= value (hi + 1 if none); positions increase.
ATTN_HD int64_t first_at_least(const int64_t* pos, int64_t lo, int64_t hi, int64_t value) {
  int64_t end = hi + 1;
  while (lo < end) {
    const int64_t mid = lo + (end - lo) / 2;
    if (pos[mid] >= value) end = mid;
    else lo = mid + 1;
  }
  return lo;
}

// x + y > INT64_MAX, for x >= 0.
ATTN_HD bool exceeds_int64(int64_t x, int64_t y) { return y > 0 && x > kUnboundedHi - y; }

struct Trimmed {
  int64_t q_first = 0, q_count = 0, kv_first = 0, kv_count = 0;
};

// The valid tokens of one document present on both sides (docs/semantics.md#3-metadata).
ATTN_HD Trimmed trim_document(RowRef q, DocRun qr, RowRef kv, DocRun kr, int mask) {
  Trimmed t{qr.first, qr.last - qr.first + 1, kr.first, kr.last - kr.first + 1};
  if (!mask_top_left(mask) && !mask_bottom_right(mask)) return t;
  // Bottom-right shifts both thresholds by the difference of the run lengths.
  const int64_t shift = mask_bottom_right(mask) ? t.q_count - t.kv_count : 0;
  // A threshold past INT64_MAX (positions near it) is one no position reaches.
  const int64_t q_from = kv.pos[kr.first], kv_past = q.pos[qr.last];
  const int64_t q_begin = exceeds_int64(q_from, shift) ? qr.last + 1 : first_at_least(q.pos, qr.first, qr.last, q_from + shift);
  const int64_t kv_end = exceeds_int64(kv_past, 1 - shift) ? kr.last + 1 : first_at_least(kv.pos, kr.first, kr.last, kv_past + (1 - shift));
  t.q_first = q_begin;
  t.q_count = qr.last + 1 - q_begin;
  t.kv_count = kv_end - kr.first;
  if (t.q_count <= 0 || t.kv_count <= 0) t.q_count = t.kv_count = 0;
  return t;
}

// Seqlens (slot-indexed) and compacted offsets of a valid row; returns the
// number of documents with valid tokens and their token totals.
struct RowTotals {
  int64_t docs = 0, q_tokens = 0, kv_tokens = 0;
};

ATTN_HD RowTotals write_row(RowRef q, const DocRun* q_runs, RowRef kv, const DocRun* kv_runs, int64_t M,
                            int mask, int64_t* q_seqlens, int64_t* kv_seqlens, int64_t* q_offsets,
                            int64_t* kv_offsets) {
  RowTotals totals;
  for (int64_t k = 0; k <= M; ++k) q_offsets[k] = kv_offsets[k] = -1;
  for (int64_t k = 0; k < M; ++k) {
    q_seqlens[k] = kv_seqlens[k] = 0;
    if (q_runs[k].first < 0 || kv_runs[k].first < 0) continue;
    const Trimmed t = trim_document(q, q_runs[k], kv, kv_runs[k], mask);
    if (t.q_count == 0) continue;
    q_seqlens[k] = t.q_count;
    kv_seqlens[k] = t.kv_count;
    q_offsets[totals.docs] = t.q_first;
    kv_offsets[totals.docs] = t.kv_first;
    ++totals.docs;
    totals.q_tokens += t.q_count;
    totals.kv_tokens += t.kv_count;
  }
  return totals;
}

// --------------------------------------------------------------- one whole row
ATTN_HD void metadata_row(const MetadataParams& p, int64_t row, DocRun* q_runs, DocRun* kv_runs,
                          int32_t* large) {
  const int64_t M = p.max_segments;
  const RowRef q = row_ref(p, p.q, row), kv = row_ref(p, p.kv, row);
  RowError e = scan_side(q, 0, M, p.mask, q_runs, large, p.large_capacity);
  if (e.code < 0) e = scan_side(kv, 1, M, p.mask, kv_runs, large, p.large_capacity);
  p.errors[row] = e;
  if (e.code >= 0) return;
  const RowTotals t = write_row(q, q_runs, kv, kv_runs, M, p.mask, p.q_seqlens + row * M,
                                p.kv_seqlens + row * M, p.q_offsets + row * (M + 1),
                                p.kv_offsets + row * (M + 1));
  p.row_docs[row] = t.docs;
  p.row_q_tokens[row] = t.q_tokens;
  p.row_kv_tokens[row] = t.kv_tokens;
}

// --------------------------------------------------------------- compaction
// Row r's documents into the compacted arrays, after the exclusive scans.
ATTN_HD void compact_row(const CompactionParams& c, int64_t row) {
  const int64_t M = c.max_segments;
  int64_t s = c.doc_base[row], q_end = c.q_token_base[row], kv_end = c.kv_token_base[row];
  if (row == 0) c.cu_seqlens_q[0] = c.cu_seqlens_kv[0] = 0;
  for (int64_t k = 0, doc = 0; k < M; ++k) {
    const int64_t lq = c.q_seqlens[row * M + k];
    if (lq == 0) continue;
    q_end += lq;
    kv_end += c.kv_seqlens[row * M + k];
    c.cu_seqlens_q[s + 1] = q_end;
    c.cu_seqlens_kv[s + 1] = kv_end;
    c.ragged_offsets_q[s] = row * c.q_len + c.q_offsets[row * (M + 1) + doc];
    c.ragged_offsets_kv[s] = row * c.kv_len + c.kv_offsets[row * (M + 1) + doc];
    ++s;
    ++doc;
  }
  if (row == c.rows - 1) {
    c.ragged_offsets_q[c.documents] = c.rows * c.q_len;
    c.ragged_offsets_kv[c.documents] = c.rows * c.kv_len;
  }
}

}  // namespace attn_oracle::gpu
