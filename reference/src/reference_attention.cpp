// reference_attention.cpp: float64 attention (docs/semantics.md#5-attention-outputs-and-gradients),
// computed two independent ways that share only the data model and the tile arithmetic
// (attention_tiles.hpp): where the attended pairs come from differs.
//
//  - Dense masked: every broadcast row against its explicit [Tq, Tkv] mask of
//    docs/semantics.md#2-the-attention-mask (ids and positions, window included). Query tiles of 64 rows
//    against the [64, 64] key blocks of the row in which the mask attends
//    anything (blocks with no attended pair add nothing, so skipping them
//    changes no result); the tile's flags are the mask's entries.
//  - Per document: every compacted document of the metadata (cu_seqlens,
//    ragged_offsets) with the kernels' index rule on its trimmed runs. Query
//    tiles of the document against the span of its keys the tile's queries
//    attend; the flags are kernel_rule_allows on indices inside the runs.
//
// Semantics that are easy to get wrong:
//  - scale defaults to 1/sqrt(head_dim); query head h reads kv head h / (Hq / Hkv),
//    so dK and dV accumulate over the Hq / Hkv query heads sharing a kv head
//    (in head order, then tile order: one fixed order).
//  - the softmax subtracts the maximum of the *allowed* scores only.
//  - a query that attends nothing (padding, outside every document, emptied by a
//    window or by bottom-right alignment with q longer than kv) gets o = 0,
//    lse = -inf and dq = 0; a kv token nobody attends gets dk = dv = 0. No
//    division by a zero sum, so no NaN can appear.
//  - tensors are BSHD over broadcast rows, [R, T, H, D], which is also the THD
//    tensor [R * T, H, D] that ragged_offsets (row * T + start) address.
//
// Tested by tests/reference_attention_test.cpp (hand-computed cases, dense ==
// per-document on representable batches, backward against central finite
// differences for every mask kind) and tests/reference_tiles_test.cpp (both
// against the scalar loops of reference/scalar/ on every fixture and on drawn
// cases, tiles and key blocks cut at every edge, bitwise the same for any
// thread count). Both run as templates over the tile arithmetic's steps
// (blocked_attention.hpp), built here with the exact ones only.
#include "attn_oracle/reference/attention.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "blocked_attention.hpp"

namespace attn_oracle::ref {

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem, const AttentionInputs& in) {
  return blocked::dense_masked<tiles::ExactTile>(problem, in);
}

Expected<AttentionResult> attention_per_document(const AttentionProblem& problem, const AttentionInputs& in) {
  return blocked::per_document<tiles::ExactTile>(problem, in);
}

}  // namespace attn_oracle::ref

// The parts of both references that do not touch a tile (blocked_attention.hpp).
namespace attn_oracle::ref::blocked {

AttentionResult empty_result(const AttentionSizes& z, bool backward) {
  AttentionResult r;
  r.o.assign(z.q_elems(), 0.0);
  r.lse.assign(z.lse_elems(), kNegInf);
  if (backward)
    r.grads = AttentionGradients{std::vector<double>(z.q_elems(), 0.0),
                                 std::vector<double>(z.kv_elems(), 0.0),
                                 std::vector<double>(z.kv_elems(), 0.0)};
  return r;
}

Expected<AttentionResult> finite_or_error(AttentionResult out) {
  auto bad = [](const char* name, const std::vector<double>& t, bool lse) -> std::optional<Error> {
    for (size_t i = 0; i < t.size(); ++i)
      if (std::isnan(t[i]) || (std::isinf(t[i]) && !(lse && t[i] < 0)))
        return Error{ErrorCode::value_overflow, std::string("the float64 reference overflowed: ") + name + "[" +
                                                    std::to_string(i) + "] = " + std::to_string(t[i])};
    return std::nullopt;
  };
  if (auto e = bad("o", out.o, false)) return *e;
  if (auto e = bad("lse", out.lse, true)) return *e;
  if (out.grads)
    for (auto [name, t] : {std::pair{"dq", &out.grads->dq}, std::pair{"dk", &out.grads->dk}, std::pair{"dv", &out.grads->dv}})
      if (auto e = bad(name, *t, false)) return *e;
  return out;
}

void load_queries(Scratch& s, const Job& job, int64_t q0, int64_t m, int64_t h) {
  const int64_t Hq = job.z.heads_q, D = job.z.head_dim;
  s.q.topRows(m) = tiles::head_rows(job.in.q, q0, m, Hq, h, D);
  if (job.problem.shape.backward) s.d_o.topRows(m) = tiles::head_rows(job.in.d_o, q0, m, Hq, h, D);
}

void store_queries(const Scratch& s, Job& job, int64_t q0, int64_t m, int64_t h) {
  const int64_t Hq = job.z.heads_q, D = job.z.head_dim;
  tiles::head_rows(job.out.o, q0, m, Hq, h, D) = s.o.topRows(m);
  if (job.problem.shape.backward) tiles::head_rows(job.out.grads->dq, q0, m, Hq, h, D) = s.dq.topRows(m);
}

// ---------------------------------------------------------------------------
// Dense masked attention
// ---------------------------------------------------------------------------

std::vector<std::vector<int64_t>> attended_key_blocks(const RowMask& mask) {
  const int64_t q_tiles = (mask.q_len + kTileRows - 1) / kTileRows;
  const int64_t kv_blocks = (mask.kv_len + kTileRows - 1) / kTileRows;
  std::vector<std::vector<int64_t>> blocks(q_tiles);
  std::vector<char> hit(kv_blocks);
  for (int64_t t = 0; t < q_tiles; ++t) {
    std::fill(hit.begin(), hit.end(), 0);
    for (int64_t i = t * kTileRows; i < std::min((t + 1) * kTileRows, mask.q_len); ++i)
      for (const KeyRun* run = mask.keys_begin(i); run != mask.keys_end(i); ++run)
        std::fill(hit.begin() + run->first / kTileRows, hit.begin() + (run->end - 1) / kTileRows + 1, 1);
    for (int64_t b = 0; b < kv_blocks; ++b)
      if (hit[b]) blocks[t].push_back(b);
  }
  return blocks;
}

std::vector<TileGroup> independent_tile_groups(const std::vector<std::vector<int64_t>>& blocks) {
  std::vector<TileGroup> groups;
  std::vector<int64_t> order;
  for (int64_t t = 0; t < int64_t(blocks.size()); ++t)
    if (!blocks[t].empty()) order.push_back(t);
  // Key spans grow with the tile under every mask kind of a valid batch; sorting
  // by span start makes the sweep right for any order.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return blocks[a].front() < blocks[b].front(); });
  for (int64_t t : order) {
    const int64_t first = blocks[t].front(), end = blocks[t].back() + 1;
    if (groups.empty() || first >= groups.back().end_block) groups.push_back(TileGroup{{}, first, end});
    TileGroup& g = groups.back();
    g.tiles.push_back(t);
    g.end_block = std::max(g.end_block, end);
  }
  for (TileGroup& g : groups) std::sort(g.tiles.begin(), g.tiles.end());
  return groups;
}

int64_t gather_keys(const RowMask& mask, const std::vector<int64_t>& blocks, int64_t a0, int64_t m,
                    const tiles::ConstStridedMap& k, const tiles::ConstStridedMap& v, DenseScratch& s) {
  int64_t n = 0;
  for (int64_t b : blocks) {
    const int64_t j0 = b * kTileRows, len = std::min(kTileRows, mask.kv_len - j0);
    s.k.middleRows(n, len) = k.middleRows(j0, len);
    s.v.middleRows(n, len) = v.middleRows(j0, len);
    s.gathered_at[b] = n;
    n += len;
  }
  s.tile.allowed.topLeftCorner(m, n).setZero();
  for (int64_t i = 0; i < m; ++i)
    for (const KeyRun* run = mask.keys_begin(a0 + i); run != mask.keys_end(a0 + i); ++run)
      for (int64_t j = run->first; j < run->end;) {  // every run lies in attended blocks, block by block
        const int64_t b = j / kTileRows, end = std::min(run->end, (b + 1) * kTileRows);
        s.tile.allowed.row(i).segment(s.gathered_at[b] + j - b * kTileRows, end - j).setOnes();
        j = end;
      }
  return n;
}

void scatter_key_gradients(const std::vector<int64_t>& blocks, int64_t kv_len, DenseScratch& s) {
  int64_t n = 0;
  for (int64_t b : blocks) {
    const int64_t j0 = b * kTileRows, len = std::min(kTileRows, kv_len - j0);
    s.row_dk.middleRows(j0, len) += s.dk.middleRows(n, len);
    s.row_dv.middleRows(j0, len) += s.dv.middleRows(n, len);
    n += len;
  }
}

// ---------------------------------------------------------------------------
// Per-document attention
// ---------------------------------------------------------------------------

Documents documents_of(const Metadata& md, const PackedBatch& b, const AttentionSizes& z) {
  Documents docs;
  // Documents are listed row by row; a document's q run lies inside one row.
  for (int64_t r = 0, s = 0; r <= z.rows; ++r) {
    while (s < md.documents() && md.ragged_offsets_q[s] / z.q_len < r) ++s;
    docs.first_of_row.push_back(s);
  }
  const int64_t tokens = z.rows * z.q_len;
  docs.run_start.reserve(tokens + 1);
  auto start_runs_up_to = [&](int64_t t) {  // tokens before t that no document holds have no run
    while (int64_t(docs.run_start.size()) <= t) docs.run_start.push_back(int64_t(docs.key_runs.size()));
  };
  for (int64_t s = 0; s < md.documents(); ++s) {
    const DocRuns d{md.ragged_offsets_q[s], md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s],
                    md.ragged_offsets_kv[s], md.cu_seqlens_kv[s + 1] - md.cu_seqlens_kv[s]};
    docs.runs.push_back(d);
    docs.max_queries = std::max(docs.max_queries, d.lq);
    docs.max_keys = std::max(docs.max_keys, d.lkv);
    for (int64_t a = 0; a < d.lq; ++a) {
      start_runs_up_to(d.q0 + a);
      bool in_run = false;
      for (int64_t j = 0; j < d.lkv; ++j) {
        const bool allowed = kernel_rule_allows(b.mask, b.window, a, j, d.lq, d.lkv);
        if (allowed && !in_run) docs.key_runs.push_back(KeyRun{j, j + 1});
        if (allowed) docs.key_runs.back().end = j + 1;
        in_run = allowed;
      }
    }
  }
  start_runs_up_to(tokens);
  return docs;
}

KeyRun tile_flags(const Documents& docs, const DocRuns& d, int64_t a0, int64_t m, Flags& allowed) {
  KeyRun span{d.lkv, 0};
  const int64_t* start = docs.run_start.data() + d.q0 + a0;
  if (start[0] == start[m]) return span;
  span.first = docs.key_runs[start[0]].first;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = start[i]; k < start[i + 1]; ++k) {
      span.first = std::min(span.first, docs.key_runs[k].first);
      span.end = std::max(span.end, docs.key_runs[k].end);
    }
  const int64_t n = span.end - span.first;
  allowed.topLeftCorner(m, n).setZero();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = start[i]; k < start[i + 1]; ++k) {
      const KeyRun& run = docs.key_runs[k];
      allowed.row(i).segment(run.first - span.first, run.end - run.first).setOnes();
    }
  return span;
}

}  // namespace attn_oracle::ref::blocked
