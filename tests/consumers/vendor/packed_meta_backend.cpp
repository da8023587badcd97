// packed_meta_backend.cpp: the metadata code of a fictional library,
// packed_meta 1.4.2, with the flaws such code has in the wild. It computes
// nothing itself: it takes the reference's metadata and bends it the way its
// bugs would, so that each flaw is one readable line.
//  - A shallow limitation: its row scan reads the first token of every row, and
//    aborts on a row with no tokens on a side. unsupported() says so, and the
//    suite declines those inputs instead of failing on them.
//  - A crash in one rare input class: an id above max_segments indexes past its
//    per-row table (a segfault, made deterministic here).
//  - A known failure (known_failures.txt): it checks every q row before the kv
//    rows, so an input with violations on both sides can get another code.
//  - Two independent deep bugs, wrong values without a crash: a row's first q
//    offset is taken as 0 (leading padding ignored), and the last cumulative kv
//    length is one too large when a batch holds two or more documents.
#include <attn_oracle/seam/backend.hpp>
#include <attn_oracle/reference/metadata.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>

namespace {

using namespace attn_oracle;

// True when some row of the side has only padding (or no tokens at all).
bool has_row_without_tokens(const IntArray& ids) {
  const int64_t len = ids.shape.empty() ? 0 : ids.shape.back();
  if (len == 0) return true;
  for (size_t row = 0; row < ids.data.size(); row += len)
    if (std::all_of(ids.data.begin() + row, ids.data.begin() + row + len, [](int64_t id) { return id == 0; })) return true;
  return false;
}

bool is_whole_input_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::bad_mask: case ErrorCode::bad_window: case ErrorCode::bad_max_segments:
    case ErrorCode::rank_mismatch: case ErrorCode::shape_mismatch: case ErrorCode::extra_dims_mismatch: return true;
    default: return false;
  }
}

class PackedMeta final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "packed_meta"; }
  std::string version() const override { return "1.4.2"; }
  MetadataCapability* metadata() override { return this; }

  std::optional<std::string> unsupported(const PackedBatch& batch) override {
    if (has_row_without_tokens(batch.q.segment_ids) || has_row_without_tokens(batch.kv.segment_ids))
      return "a row with no tokens on a side (packed_meta reads each row's first token)";
    return std::nullopt;
  }

  Expected<Metadata> metadata(const PackedBatch& batch) override {
    if (has_row_without_tokens(batch.q.segment_ids) || has_row_without_tokens(batch.kv.segment_ids)) std::abort();
    Expected<Metadata> md = ref::metadata(batch);
    if (!md && md.error().code == ErrorCode::too_many_segments) std::raise(SIGSEGV);
    if (!md) return q_rows_first(batch, md.error());
    Metadata out = md.value();
    const int64_t slots = out.max_segments + 1;
    for (size_t row = 0; row < out.q_offsets.size(); row += slots)
      if (out.q_offsets[row] > 0) out.q_offsets[row] = 0;
    if (out.cu_seqlens_kv.size() > 2) ++out.cu_seqlens_kv.back();
    return out;
  }

 private:
  // Its validation order: every q row, then every kv row.
  static Expected<Metadata> q_rows_first(const PackedBatch& batch, const Error& first) {
    if (is_whole_input_code(first.code)) return first;
    PackedBatch q_only = batch;
    q_only.kv = batch.q;
    Expected<Metadata> q = ref::metadata(q_only);
    return !q && !is_whole_input_code(q.error().code) ? q.error() : first;
  }
};

}  // namespace

ATTN_ORACLE_REGISTER_BACKEND(PackedMeta);
