// metadata_twin.cpp: the CPU twin of the metadata kernels. The same row functions
// (metadata_row.hpp) run in a loop over rows instead of across CUDA threads; the
// exclusive scans over rows are std::exclusive_scan instead of CUB's.
#include <numeric>

#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/metadata_row.hpp"

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

void MetadataBuffers::allocate(MetadataParams& p) {
  const int64_t M = p.max_segments;
  q_seqlens.assign(p.rows * M, 0);
  kv_seqlens.assign(p.rows * M, 0);
  q_offsets.assign(p.rows * (M + 1), -1);
  kv_offsets.assign(p.rows * (M + 1), -1);
  errors.assign(p.rows, RowError{});
  row_docs.assign(p.rows, 0);
  row_q_tokens.assign(p.rows, 0);
  row_kv_tokens.assign(p.rows, 0);
  p.q_seqlens = q_seqlens.data();
  p.kv_seqlens = kv_seqlens.data();
  p.q_offsets = q_offsets.data();
  p.kv_offsets = kv_offsets.data();
  p.errors = errors.data();
  p.row_docs = row_docs.data();
  p.row_q_tokens = row_q_tokens.data();
  p.row_kv_tokens = row_kv_tokens.data();
}

Error row_error_to_error(const MetadataParams& p, int64_t row, const RowError& e) {
  const SideParams& s = e.side == 0 ? p.q : p.kv;
  const int64_t side_row = side_row_of(p, s, row);
  return Error{static_cast<ErrorCode>(e.code),
               std::string(e.side == 0 ? "q" : "kv") + " side, row " + row_index_text(p.extra_rank, p.batch, side_row) +
                   ", token " + std::to_string(e.token) + ": " + describe(e, p.mask)};
}

Metadata assemble_metadata(const MetadataParams& p, const Shape& extra, MetadataBuffers&& rows) {
  std::vector<int64_t> doc_base(p.rows), q_base(p.rows), kv_base(p.rows);
  std::exclusive_scan(rows.row_docs.begin(), rows.row_docs.end(), doc_base.begin(), int64_t{0});
  std::exclusive_scan(rows.row_q_tokens.begin(), rows.row_q_tokens.end(), q_base.begin(), int64_t{0});
  std::exclusive_scan(rows.row_kv_tokens.begin(), rows.row_kv_tokens.end(), kv_base.begin(), int64_t{0});
  const int64_t docs = p.rows == 0 ? 0 : doc_base.back() + rows.row_docs.back();
  Metadata md;
  md.extra = extra;
  md.batch = p.batch;
  md.max_segments = p.max_segments;
  md.cu_seqlens_q.assign(docs + 1, 0);
  md.cu_seqlens_kv.assign(docs + 1, 0);
  md.ragged_offsets_q.assign(docs + 1, p.rows * p.q.len);
  md.ragged_offsets_kv.assign(docs + 1, p.rows * p.kv.len);
  CompactionParams c{rows.q_offsets.data(), rows.q_seqlens.data(), rows.kv_offsets.data(), rows.kv_seqlens.data(),
                     doc_base.data(), q_base.data(), kv_base.data(), p.rows, p.max_segments, p.q.len, p.kv.len, docs,
                     md.cu_seqlens_q.data(), md.cu_seqlens_kv.data(), md.ragged_offsets_q.data(), md.ragged_offsets_kv.data()};
  for (int64_t r = 0; r < p.rows; ++r) compact_row(c, r);
  md.q_seqlens = std::move(rows.q_seqlens);
  md.kv_seqlens = std::move(rows.kv_seqlens);
  md.q_offsets = std::move(rows.q_offsets);
  md.kv_offsets = std::move(rows.kv_offsets);
  return md;
}

Expected<Metadata> metadata_twin(const PackedBatch& batch) {
  auto prepared = prepare_batch(batch);
  if (!prepared) return prepared.error();
  MetadataParams p = prepared->params;
  MetadataBuffers rows;
  rows.allocate(p);
  // Scratch for one row at a time: the twin walks rows in order.
  std::vector<DocRun> q_runs(p.max_segments), kv_runs(p.max_segments);
  std::vector<int32_t> large(p.large_capacity);
  for (int64_t r = 0; r < p.rows; ++r) {
    metadata_row(p, r, q_runs.data(), kv_runs.data(), large.data());
    if (rows.errors[r].code >= 0) return row_error_to_error(p, r, rows.errors[r]);
  }
  return assemble_metadata(p, prepared->extra, std::move(rows));
}

int64_t metadata_twin_scratch_bytes(const PackedBatch& batch) {
  auto prepared = prepare_batch(batch);
  if (!prepared) return 0;
  const MetadataParams& p = prepared->params;
  const int64_t per_row = sizeof(RowError) + 3 * sizeof(int64_t);  // errors, docs and token totals
  return 2 * p.max_segments * int64_t(sizeof(DocRun)) + p.large_capacity * int64_t(sizeof(int32_t)) +
         p.rows * per_row + 3 * p.rows * int64_t(sizeof(int64_t));  // + the three scans
}

}  // namespace attn_oracle::gpu
