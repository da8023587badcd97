// metadata_twin.cpp: the CPU twin of the metadata kernels
// (metadata_stream_kernels.cu): their steps (metadata_tokens.hpp) in loops, in the
// kernels' order: tokens, runs (2a for every run, then 2b), slots, the exclusive
// scan over slots (std::exclusive_scan for CUB's), the scatter. The tables and the
// hash take plain stores where the kernels take atomics (HostOps); the results are
// counts, minima and maxima, so no thread order or block size can make the
// kernels' integers differ from these. Also the text of a row error, which the
// CUDA entry point shares.
// Checked against the reference by the metadata properties on the `cpu` backend,
// and against the kernels by tests/metadata_twin_test.cpp on a device.
#include <algorithm>
#include <numeric>

#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/metadata_tokens.hpp"

namespace attn_oracle::gpu {
namespace {

// The side's own row, with b spelled out when there are extra dims.
std::string row_index_text(int extra_rank, int64_t batch, int64_t side_row) {
  std::string text = std::to_string(side_row);
  if (extra_rank > 0) text += " (b = " + std::to_string(side_row % batch) + ")";
  return text;
}

std::string describe(const RowError& e, int mask) {
  switch (e.code) {
    case kNegativeId: return "id " + std::to_string(e.value) + " is negative";
    case kNoncontiguous: return "id " + std::to_string(e.value) + " reappears after id " + std::to_string(e.other);
    case kTooManySegments: return "id " + std::to_string(e.value) + " exceeds max_segments " + std::to_string(e.other);
    case kIdsOutOfOrder: return "document id " + std::to_string(e.value) + " follows document id " + std::to_string(e.other);
    case kPaddingWithNonPaddingMask: return "padding (id 0) under mask " + std::string(to_string(static_cast<MaskKind>(mask)));
    case kPositionsNotIncreasing: return "position " + std::to_string(e.value) + " does not exceed position " + std::to_string(e.other) + " of the previous token";
    case kNegativePosition: return "position " + std::to_string(e.value) + " is negative";
  }
  return "invalid";
}

}  // namespace

Error row_error_to_error(const MetadataParams& p, int64_t row, const RowError& e) {
  const SideParams& s = e.side == 0 ? p.q : p.kv;
  const int64_t side_row = side_row_of(p, s, row);
  return Error{static_cast<ErrorCode>(e.code),
               std::string(e.side == 0 ? "q" : "kv") + " side, row " + row_index_text(p.extra_rank, p.batch, side_row) +
                   ", token " + std::to_string(e.token) + ": " + describe(e, p.mask)};
}

namespace {

// The twin's stand-ins for the kernels' atomics.
struct HostOps {
  static uint64_t load(const uint64_t* a) { return *a; }
  static uint64_t cas(uint64_t* a, uint64_t expected, uint64_t desired) {
    const uint64_t held = *a;
    if (held == expected) *a = desired;
    return held;
  }
  static void min(uint64_t* a, uint64_t v) { *a = std::min(*a, v); }
  static void max(uint64_t* a, uint64_t v) { *a = std::max(*a, v); }
};

// Step 1 over the whole stream: per-token codes into the row keys, run starts and
// ends (in stream order: run k's ends at index k); returns the runs of ids > M.
int64_t scan_tokens(const MetadataParams& p, RunTables& r, std::vector<int64_t>& run_first,
                    std::vector<int64_t>& run_last) {
  const int64_t row_tokens = p.q.len + p.kv.len, total = p.rows * row_tokens;
  int64_t large = 0;
  StreamCursor c;
  RowRef row{nullptr, nullptr, 0};
  for (int64_t g = 0; g < total; ++g, advance(c, 1, row_tokens)) {
    const StreamToken s = stream_token(p, c);
    if (s.t == 0 || g == 0) row = side_ref(p, s.row, s.side);
    const TokenCheck check = check_token(row, s.t, p.max_segments, p.mask);
    if (check.code >= 0) note_error<HostOps>(r, s.row, s.side, check.code, s.t);
    if (check.run_start) {
      run_first.push_back(g);
      large += row.ids[s.t] > p.max_segments;
    }
    if (check.run_end) run_last.push_back(g);
  }
  return large;
}

}  // namespace

Expected<Metadata> metadata_twin(const PackedBatch& batch) {
  auto prepared = prepare_batch(batch);
  if (!prepared) return prepared.error();
  MetadataParams p = prepared->params;
  const int64_t M = p.max_segments;
  Metadata md;
  md.extra = prepared->extra;
  md.batch = p.batch;
  md.max_segments = M;
  md.q_seqlens.assign(p.rows * M, 0);
  md.kv_seqlens.assign(p.rows * M, 0);
  md.q_offsets.assign(p.rows * (M + 1), -1);
  md.kv_offsets.assign(p.rows * (M + 1), -1);
  p.q_seqlens = md.q_seqlens.data(), p.kv_seqlens = md.kv_seqlens.data();
  p.q_offsets = md.q_offsets.data(), p.kv_offsets = md.kv_offsets.data();

  std::vector<uint64_t> row_keys(p.rows, kNoKey), first_tab(p.rows * 2 * M, kNoKey), last_tab(p.rows * 2 * M, 0);
  uint64_t error_row = kNoKey;
  RunTables r;
  r.row_keys = row_keys.data(), r.error_row = &error_row, r.first_tab = first_tab.data(), r.last_tab = last_tab.data();
  std::vector<int64_t> run_first, run_last;
  const int64_t large = scan_tokens(p, r, run_first, run_last);
  std::vector<uint64_t> hash(large > 0 ? 2 * large + 1 : 0, kNoKey);
  r.run_first = run_first.data(), r.run_last = run_last.data(), r.runs = int64_t(run_first.size());
  r.hash = hash.data(), r.hash_capacity = hash.size();
  for (int64_t k = 0; k < r.runs; ++k) index_run<HostOps>(p, r, k);
  for (int64_t k = 0; k < r.runs; ++k) check_reappearance<HostOps>(p, r, k);
  if (error_row != kNoKey) {
    const int64_t row = int64_t(error_row);
    return row_error_to_error(p, row, row_error_of(p, r, row));
  }

  const int64_t slots = p.rows * M;
  std::vector<SlotDoc> docs(slots);
  std::vector<SlotTotals> totals(slots), base(slots);
  for (int64_t i = 0; i < slots; ++i) {
    docs[i] = slot_document(p, i / M, i % M, first_tab.data(), last_tab.data());
    totals[i] = slot_totals(docs[i]);
  }
  std::exclusive_scan(totals.begin(), totals.end(), base.begin(), SlotTotals{});
  const int64_t documents = slots == 0 ? 0 : base.back().docs + totals.back().docs;
  md.cu_seqlens_q.assign(documents + 1, 0);
  md.cu_seqlens_kv.assign(documents + 1, 0);
  md.ragged_offsets_q.assign(documents + 1, p.rows * p.q.len);
  md.ragged_offsets_kv.assign(documents + 1, p.rows * p.kv.len);
  CompactionParams c;
  c.cu_seqlens_q = md.cu_seqlens_q.data(), c.cu_seqlens_kv = md.cu_seqlens_kv.data();
  c.ragged_offsets_q = md.ragged_offsets_q.data(), c.ragged_offsets_kv = md.ragged_offsets_kv.data();
  for (int64_t i = 0; i < slots; ++i) scatter_slot(p, c, i / M, docs[i], base[i], base[(i / M) * M]);
  return md;
}

int64_t metadata_twin_scratch_bytes(const PackedBatch& batch) {
  auto prepared = prepare_batch(batch);
  if (!prepared) return 0;
  const MetadataParams& p = prepared->params;
  std::vector<uint64_t> keys(p.rows, kNoKey);
  uint64_t error_row = kNoKey;
  RunTables r;
  r.row_keys = keys.data(), r.error_row = &error_row;
  std::vector<int64_t> run_first, run_last;
  const int64_t large = scan_tokens(p, r, run_first, run_last);
  const int64_t runs = int64_t(run_first.size()), slots = p.rows * p.max_segments;
  const int64_t per_slot = sizeof(SlotDoc) + 2 * sizeof(SlotTotals) + 4 * sizeof(uint64_t);  // + 2 tables x 2 sides
  return p.rows * int64_t(sizeof(uint64_t)) + 2 * runs * int64_t(sizeof(int64_t)) +
         (large > 0 ? 2 * large + 1 : 0) * int64_t(sizeof(uint64_t)) + slots * per_slot;
}

}  // namespace attn_oracle::gpu
