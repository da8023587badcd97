// metadata_tokens.hpp: the token-parallel metadata algorithm's per-token, per-run
// and per-slot steps, shared by the CUDA kernels (metadata_stream_kernels.cu) and
// the CPU twin (metadata_twin.cpp).
//
// The input is one flat token stream: broadcast row r contributes its q tokens
// [0, Tq) and then its kv tokens [0, Tkv); a (row, side) pair is a segment.
//   1 tokens  every token alone: its lowest per-token code (negative id, padding
//             under a non-padding mask, position not increasing inside a run,
//             id above M, negative position) and whether it starts or ends a run
//             (a maximal block of one positive id). Run starts are counted by a
//             scan over the stream, so run k's first and last token land at index
//             k of two arrays, in stream order.
//   2 runs    every run alone: ids out of order against the previous run of its
//             segment; the first and last token of each id <= M in a
//             [row, side, M] table (min / max), ids > M in a hash keyed by
//             (row, side, id) that keeps the earliest run; then a run whose id
//             has an earlier run is noncontiguous.
//   3 slots   every (row, slot) alone: the document's trimmed runs
//             (trim_document), its seqlens, and its counts, which an exclusive
//             scan over slots turns into cu_seqlens and the compacted offsets.
// A violation is a key (side, code, token) that an atomic min keeps per row: q
// before kv, then the lowest code, then the first token, as the reference orders
// them; the first row with a key is the error. Every step that combines tokens
// is a count, a min or a max, so neither the order threads run in nor the block
// decomposition can change an integer of the result.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"
#include "attn_oracle/gpu/mask_rule.hpp"
#include "attn_oracle/gpu/metadata_params.hpp"

namespace attn_oracle::gpu {

inline constexpr uint64_t kNoKey = ~uint64_t{0};  // empty table entry, no error, absent run

// --------------------------------------------------------------- the stream
// Where flat token g sits: its broadcast row and its index inside the row's
// Tq + Tkv tokens. The kernels step a cursor instead of dividing per token.
struct StreamCursor {
  int64_t row = 0, within = 0;
};

ATTN_HD StreamCursor cursor_at(int64_t g, int64_t row_tokens) { return StreamCursor{g / row_tokens, g % row_tokens}; }

ATTN_HD void advance(StreamCursor& c, int64_t n, int64_t row_tokens) {
  c.within += n;
  if (c.within >= row_tokens) {
    c.row += c.within / row_tokens;
    c.within %= row_tokens;
  }
}

struct StreamToken {
  int64_t row;
  int side;   // 0 = q, 1 = kv
  int64_t t;  // token index inside the side's row
};

ATTN_HD StreamToken stream_token(const MetadataParams& p, StreamCursor c) {
  return c.within < p.q.len ? StreamToken{c.row, 0, c.within} : StreamToken{c.row, 1, c.within - p.q.len};
}

ATTN_HD RowRef side_ref(const MetadataParams& p, int64_t row, int side) {
  return row_ref(p, side == 0 ? p.q : p.kv, row);
}

// --------------------------------------------------------------- error keys
// (side, code, token) in one word, ordered as the reference orders violations.
ATTN_HD uint64_t error_key(int side, int code, int64_t t) {
  return (uint64_t(side) << 62) | (uint64_t(code - kNegativeId) << 59) | uint64_t(t);
}
ATTN_HD int key_side(uint64_t key) { return int(key >> 62); }
ATTN_HD int key_code(uint64_t key) { return int((key >> 59) & 7u) + kNegativeId; }
ATTN_HD int64_t key_token(uint64_t key) { return int64_t(key & ((uint64_t{1} << 59) - 1)); }

// --------------------------------------------------------------- 1 tokens
struct TokenCheck {
  int code = -1;  // lowest per-token code, -1 when none
  bool run_start = false, run_end = false;
};

ATTN_HD TokenCheck check_token(RowRef row, int64_t t, int64_t M, int mask) {
  TokenCheck c;
  const int64_t id = row.ids[t];
  if (id < 0) {
    c.code = kNegativeId;
    return c;
  }
  if (id == 0) {
    if (!mask_allows_padding(mask)) c.code = kPaddingWithNonPaddingMask;
    return c;
  }
  c.run_start = t == 0 || row.ids[t - 1] != id;
  c.run_end = t == row.len - 1 || row.ids[t + 1] != id;
  const int64_t pos = row.pos[t];
  // The three codes in increasing order: the first that holds is the lowest.
  if (id > M) c.code = kTooManySegments;
  else if (!c.run_start && pos <= row.pos[t - 1]) c.code = kPositionsNotIncreasing;
  else if (pos < 0) c.code = kNegativePosition;
  return c;
}

// --------------------------------------------------------------- 2 runs
struct RunRef {
  StreamToken first;  // the run's first token
  int64_t last;       // its last token, same row and side
  int64_t id;
};

ATTN_HD RunRef run_ref(const MetadataParams& p, const int64_t* run_first, const int64_t* run_last, int64_t k) {
  const int64_t row_tokens = p.q.len + p.kv.len;
  const StreamToken f = stream_token(p, cursor_at(run_first[k], row_tokens));
  const StreamToken l = stream_token(p, cursor_at(run_last[k], row_tokens));
  return RunRef{f, l.t, side_ref(p, f.row, f.side).ids[f.t]};
}

ATTN_HD bool same_segment(const StreamToken& a, const StreamToken& b) { return a.row == b.row && a.side == b.side; }

// Index of the [row, side, M] tables of the runs of ids <= M.
ATTN_HD int64_t table_index(const MetadataParams& p, const StreamToken& s, int64_t id) {
  return (s.row * 2 + s.side) * p.max_segments + (id - 1);
}

ATTN_HD uint64_t run_hash(const StreamToken& s, int64_t id) {
  uint64_t h = uint64_t(id) * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t(s.row) * 2 + uint64_t(s.side)) * 0xC2B2AE3D27D4EB4Full;
  return h ^ (h >> 29);
}

// Open addressing over run indices (never removed): inserts run k or lowers the
// index stored for its key. A slot only ever changes to a run of the same key, so
// comparing keys through a stale read of the slot is still right. `Ops` supplies
// load, compare-and-swap and min: atomics on the device, plain code in the twin.
template <class Ops, class SameKey>
ATTN_HD void hash_insert_min(uint64_t* table, uint64_t capacity, uint64_t h, uint64_t k, SameKey same_key) {
  for (uint64_t probe = 0; probe < capacity; ++probe) {
    uint64_t* slot = table + (h + probe) % capacity;
    uint64_t held = Ops::load(slot);
    if (held == kNoKey) {
      held = Ops::cas(slot, kNoKey, k);
      if (held == kNoKey) return;
    }
    if (same_key(held, k)) {
      Ops::min(slot, k);
      return;
    }
  }
}

// The earliest run of k's key (k itself when it is the first); after every insert.
template <class SameKey>
ATTN_HD uint64_t hash_earliest(const uint64_t* table, uint64_t capacity, uint64_t h, uint64_t k, SameKey same_key) {
  for (uint64_t probe = 0; probe < capacity; ++probe) {
    const uint64_t held = table[(h + probe) % capacity];
    if (held == kNoKey) break;  // unreachable: k was inserted
    if (same_key(held, k)) return held;
  }
  return k;
}

// Index of the run starting at flat token g (the run list is sorted by first token).
ATTN_HD int64_t run_starting_at(const int64_t* run_first, int64_t runs, int64_t g) {
  int64_t lo = 0, hi = runs;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (run_first[mid] < g) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// What the runs steps read and write; one struct for kernel and twin.
struct RunTables {
  const int64_t* run_first = nullptr;  // [runs] flat first token of run k
  const int64_t* run_last = nullptr;   // [runs] flat last token
  int64_t runs = 0;
  uint64_t* first_tab = nullptr;  // [rows, 2, M] first token of each id <= M, kNoKey when absent
  uint64_t* last_tab = nullptr;   // [rows, 2, M] last token (0 when absent)
  uint64_t* hash = nullptr;       // [hash_capacity] runs of ids > M
  uint64_t hash_capacity = 0;     // 2 * (runs of ids > M) + 1; 0 when there are none
  uint64_t* row_keys = nullptr;   // [rows] lowest error key, kNoKey when valid
  uint64_t* error_row = nullptr;  // first row with a key, kNoKey when none
};

template <class Ops>
ATTN_HD void note_error(const RunTables& r, int64_t row, int side, int code, int64_t t) {
  Ops::min(r.row_keys + row, error_key(side, code, t));
  Ops::min(r.error_row, uint64_t(row));
}

// Step 2a for run k: out of order against run k - 1; into the tables or the hash.
template <class Ops>
ATTN_HD void index_run(const MetadataParams& p, const RunTables& r, int64_t k) {
  const RunRef run = run_ref(p, r.run_first, r.run_last, k);
  if (k > 0) {
    const RunRef previous = run_ref(p, r.run_first, r.run_last, k - 1);
    if (same_segment(previous.first, run.first) && run.id <= previous.id)
      note_error<Ops>(r, run.first.row, run.first.side, kIdsOutOfOrder, run.first.t);
  }
  if (run.id <= p.max_segments) {
    const int64_t i = table_index(p, run.first, run.id);
    Ops::min(r.first_tab + i, uint64_t(run.first.t));
    Ops::max(r.last_tab + i, uint64_t(run.last));
    return;
  }
  auto same_key = [&](uint64_t a, uint64_t b) {
    const RunRef x = run_ref(p, r.run_first, r.run_last, int64_t(a));
    const RunRef y = run_ref(p, r.run_first, r.run_last, int64_t(b));
    return same_segment(x.first, y.first) && x.id == y.id;
  };
  hash_insert_min<Ops>(r.hash, r.hash_capacity, run_hash(run.first, run.id), uint64_t(k), same_key);
}

// Step 2b for run k, after 2a for every run: noncontiguous when its id ran before.
template <class Ops>
ATTN_HD void check_reappearance(const MetadataParams& p, const RunTables& r, int64_t k) {
  const RunRef run = run_ref(p, r.run_first, r.run_last, k);
  bool earlier;
  if (run.id <= p.max_segments) {
    earlier = r.first_tab[table_index(p, run.first, run.id)] < uint64_t(run.first.t);
  } else {
    auto same_key = [&](uint64_t a, uint64_t b) {
      const RunRef x = run_ref(p, r.run_first, r.run_last, int64_t(a));
      const RunRef y = run_ref(p, r.run_first, r.run_last, int64_t(b));
      return same_segment(x.first, y.first) && x.id == y.id;
    };
    earlier = hash_earliest(r.hash, r.hash_capacity, run_hash(run.first, run.id), uint64_t(k), same_key) < uint64_t(k);
  }
  if (earlier) note_error<Ops>(r, run.first.row, run.first.side, kNoncontiguous, run.first.t);
}

// --------------------------------------------------------------- trimming
// A document's runs: its first and last token on one side of one row.
struct DocRun {
  int64_t first = -1;  // first token of the run, -1 when the document is absent
  int64_t last = -1;   // last token of the run
};

// Positions strictly increase inside a document, so its valid tokens
// (docs/semantics.md#3-metadata) are a suffix of its q run and a prefix of its kv
// run, found by binary search against the other side's first / last position:
//   top-left causal:  q valid iff pos_q >= pos_kv[first];  kv valid iff pos_kv <= pos_q[last]
//   bottom-right:     q valid iff pos_q >= (Lq - Lkv) + pos_kv[first]
//                     kv valid iff pos_kv <= (Lkv - Lq) + pos_q[last]

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

// The valid tokens of one document present on both sides.
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

// --------------------------------------------------------------- 3 slots
struct SlotDoc {
  int64_t q_first = 0, q_count = 0, kv_first = 0, kv_count = 0;  // q_count == 0: no document
};

struct SlotTotals {
  int64_t docs = 0, q_tokens = 0, kv_tokens = 0;
};

ATTN_HD SlotTotals operator+(const SlotTotals& a, const SlotTotals& b) {
  return SlotTotals{a.docs + b.docs, a.q_tokens + b.q_tokens, a.kv_tokens + b.kv_tokens};
}

// Slot k of a valid row: the document's runs from the tables, trimmed. Writes its
// seqlens and marks the row's compacted offsets -1 (the scatter fills them).
ATTN_HD SlotDoc slot_document(const MetadataParams& p, int64_t row, int64_t k, const uint64_t* first_tab,
                              const uint64_t* last_tab) {
  const int64_t M = p.max_segments;
  SlotDoc d;
  const uint64_t qf = first_tab[(row * 2) * M + k], kf = first_tab[(row * 2 + 1) * M + k];
  if (qf != kNoKey && kf != kNoKey) {
    const DocRun q{int64_t(qf), int64_t(last_tab[(row * 2) * M + k])};
    const DocRun kv{int64_t(kf), int64_t(last_tab[(row * 2 + 1) * M + k])};
    const Trimmed t = trim_document(side_ref(p, row, 0), q, side_ref(p, row, 1), kv, p.mask);
    if (t.q_count > 0) d = SlotDoc{t.q_first, t.q_count, t.kv_first, t.kv_count};
  }
  p.q_seqlens[row * M + k] = d.q_count;
  p.kv_seqlens[row * M + k] = d.kv_count;
  p.q_offsets[row * (M + 1) + k] = p.kv_offsets[row * (M + 1) + k] = -1;
  if (k == M - 1) p.q_offsets[row * (M + 1) + M] = p.kv_offsets[row * (M + 1) + M] = -1;
  return d;
}

ATTN_HD SlotTotals slot_totals(const SlotDoc& d) {
  return d.q_count > 0 ? SlotTotals{1, d.q_count, d.kv_count} : SlotTotals{};
}

// Document s = base.docs of the compacted arrays, and its place among its row's
// documents (row_base: the totals before the row's first slot).
ATTN_HD void scatter_slot(const MetadataParams& p, const CompactionParams& c, int64_t row, const SlotDoc& d,
                          const SlotTotals& base, const SlotTotals& row_base) {
  if (d.q_count == 0) return;
  const int64_t M = p.max_segments, s = base.docs, in_row = base.docs - row_base.docs;
  c.cu_seqlens_q[s + 1] = base.q_tokens + d.q_count;
  c.cu_seqlens_kv[s + 1] = base.kv_tokens + d.kv_count;
  c.ragged_offsets_q[s] = row * p.q.len + d.q_first;
  c.ragged_offsets_kv[s] = row * p.kv.len + d.kv_first;
  p.q_offsets[row * (M + 1) + in_row] = d.q_first;
  p.kv_offsets[row * (M + 1) + in_row] = d.kv_first;
}

// --------------------------------------------------------------- the error
// The values the reference reports with the violation a key names. `previous_id`:
// the id of the run before the token's run in its segment (ids out of order only).
ATTN_HD RowError error_of_key(const MetadataParams& p, int64_t row, uint64_t key, int64_t previous_id) {
  const int side = key_side(key), code = key_code(key);
  const int64_t t = key_token(key);
  const RowRef r = side_ref(p, row, side);
  switch (code) {
    case kNegativeId: return RowError{code, side, t, r.ids[t], 0};
    case kNoncontiguous: return RowError{code, side, t, r.ids[t], t > 0 ? r.ids[t - 1] : 0};
    case kTooManySegments: return RowError{code, side, t, r.ids[t], p.max_segments};
    case kIdsOutOfOrder: return RowError{code, side, t, r.ids[t], previous_id};
    case kPaddingWithNonPaddingMask: return RowError{code, side, t, 0, p.mask};
    case kPositionsNotIncreasing: return RowError{code, side, t, r.pos[t], r.pos[t - 1]};
    default: return RowError{code, side, t, r.pos[t], 0};
  }
}

// The row's error from its key: the previous run's id for ids out of order.
ATTN_HD RowError row_error_of(const MetadataParams& p, const RunTables& r, int64_t row) {
  const uint64_t key = r.row_keys[row];
  int64_t previous_id = 0;
  if (key_code(key) == kIdsOutOfOrder) {
    const int64_t g = row * (p.q.len + p.kv.len) + key_side(key) * p.q.len + key_token(key);
    const int64_t k = run_starting_at(r.run_first, r.runs, g);
    previous_id = run_ref(p, r.run_first, r.run_last, k - 1).id;  // k > 0: an earlier run of the segment exists
  }
  return error_of_key(p, row, key, previous_id);
}

}  // namespace attn_oracle::gpu
