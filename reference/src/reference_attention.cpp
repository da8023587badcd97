// reference_attention.cpp: float64 attention (docs/semantics.md section 5), computed two
// independent ways that share only the data model and the tile arithmetic
// (attention_tiles.hpp): where the attended pairs come from differs.
//
//  - Dense masked: every broadcast row against its explicit [Tq, Tkv] mask of
//    section 3 (ids and positions, window included). Query tiles of 64 rows
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
// thread count).
#include "attn_oracle/reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_tiles.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::ref {

namespace {

using tiles::kNegInf;
using tiles::kTileRows;
using tiles::Flags;
using tiles::Matrix;
using tiles::Scratch;

// Outputs before anything is attended: o = 0, lse = -inf, gradients 0.
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

// The contract has no NaN and no infinity but lse's -inf. Validation bounds the
// magnitudes (value_overflow), so this is a guard: a result that breaks it is
// refused with the first bad element rather than handed out.
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

// What a unit of either reference reads and writes.
struct Job {
  const AttentionProblem& problem;
  const AttentionInputs& in;
  const AttentionSizes& z;
  double scale;
  AttentionResult& out;
  int64_t group() const { return z.heads_q / z.heads_kv; }
  double* lse(int64_t row, int64_t head, int64_t token) {
    return out.lse.data() + (row * z.heads_q + head) * z.q_len + token;
  }
};

// Loads query rows [q0, q0 + m) of head h (global THD tokens) into the tile.
void load_queries(Scratch& s, const Job& job, int64_t q0, int64_t m, int64_t h) {
  const int64_t Hq = job.z.heads_q, D = job.z.head_dim;
  s.q.topRows(m) = tiles::head_rows(job.in.q, q0, m, Hq, h, D);
  if (job.problem.shape.backward) s.d_o.topRows(m) = tiles::head_rows(job.in.d_o, q0, m, Hq, h, D);
}

// Stores the tile's o (and dq) rows.
void store_queries(const Scratch& s, Job& job, int64_t q0, int64_t m, int64_t h) {
  const int64_t Hq = job.z.heads_q, D = job.z.head_dim;
  tiles::head_rows(job.out.o, q0, m, Hq, h, D) = s.o.topRows(m);
  if (job.problem.shape.backward) tiles::head_rows(job.out.grads->dq, q0, m, Hq, h, D) = s.dq.topRows(m);
}

// ---------------------------------------------------------------------------
// Dense masked attention
// ---------------------------------------------------------------------------

// One worker's dense buffers: a tile's gathered keys and values, their dK, dV,
// and the row's dK, dV of one kv head.
struct DenseScratch {
  Scratch tile;
  Matrix k, v, dk, dv, row_dk, row_dv;  // [Tkv, D]
  std::vector<int64_t> gathered_at;     // per key block: where its keys sit among a tile's gathered ones
  DenseScratch(int64_t q_len, int64_t kv_len, int64_t dim)
      : tile(std::min(kTileRows, q_len), kv_len, dim), k(kv_len, dim), v(kv_len, dim), dk(kv_len, dim), dv(kv_len, dim),
        row_dk(kv_len, dim), row_dv(kv_len, dim), gathered_at(kv_len / kTileRows + 1, 0) {}
};

// The key blocks [b * 64, b * 64 + 64) in which the mask attends anything from
// query tile t's rows, per tile, in key order.
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

// Query tiles whose attended key blocks meet, joined (over tiles in order, by
// the span of their blocks: a document and any it shares a block with). No key
// block is attended from two groups, so each group's dK, dV rows are summed by
// one worker, in head and then tile order, as one worker sums the whole row:
// results are the same bits for any number of workers.
struct TileGroup {
  std::vector<int64_t> tiles;
  int64_t first_block = 0, end_block = 0;
};

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

// Copies the keys and values of the attended blocks into s.k, s.v and the mask's
// entries of query tile [a0, a0 + m) for them into the tile's flags; returns
// how many keys that is.
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

// Adds the gathered keys' dK, dV (s.dk, s.dv) to the row's (s.row_dk, s.row_dv).
void scatter_key_gradients(const std::vector<int64_t>& blocks, int64_t kv_len, DenseScratch& s) {
  int64_t n = 0;
  for (int64_t b : blocks) {
    const int64_t j0 = b * kTileRows, len = std::min(kTileRows, kv_len - j0);
    s.row_dk.middleRows(j0, len) += s.dk.middleRows(n, len);
    s.row_dv.middleRows(j0, len) += s.dv.middleRows(n, len);
    n += len;
  }
}

// Row r, kv head g, one group of tiles: every query head of the group, every tile of it.
void dense_unit(Job& job, const RowMask& mask, const std::vector<std::vector<int64_t>>& blocks,
                const TileGroup& tile_group, int64_t r, int64_t g, DenseScratch& s) {
  const AttentionSizes& z = job.z;
  const int64_t D = z.head_dim, Tq = z.q_len, Tkv = z.kv_len;
  const bool backward = job.problem.shape.backward;
  const auto k = tiles::head_rows(job.in.k, r * Tkv, Tkv, z.heads_kv, g, D);
  const auto v = tiles::head_rows(job.in.v, r * Tkv, Tkv, z.heads_kv, g, D);
  const int64_t j0 = tile_group.first_block * kTileRows;
  const int64_t keys = std::min(tile_group.end_block * kTileRows, Tkv) - j0;
  if (backward) {
    s.row_dk.middleRows(j0, keys).setZero();
    s.row_dv.middleRows(j0, keys).setZero();
  }
  for (int64_t h = g * job.group(); h < (g + 1) * job.group(); ++h)
    for (int64_t t : tile_group.tiles) {
      const int64_t a0 = t * kTileRows, m = std::min(kTileRows, Tq - a0);
      const int64_t n = gather_keys(mask, blocks[t], a0, m, k, v, s);
      load_queries(s.tile, job, r * Tq + a0, m, h);
      if (backward) {
        s.dk.topRows(n).setZero();
        s.dv.topRows(n).setZero();
      }
      tiles::attend_tile(s.tile, m, s.k.topRows(n), s.v.topRows(n), job.scale, backward, job.lse(r, h, a0),
                         s.dk.topRows(n), s.dv.topRows(n));
      store_queries(s.tile, job, r * Tq + a0, m, h);
      if (backward) scatter_key_gradients(blocks[t], Tkv, s);
    }
  if (!backward) return;
  tiles::head_rows(job.out.grads->dk, r * Tkv + j0, keys, z.heads_kv, g, D) = s.row_dk.middleRows(j0, keys);
  tiles::head_rows(job.out.grads->dv, r * Tkv + j0, keys, z.heads_kv, g, D) = s.row_dv.middleRows(j0, keys);
}

}  // namespace

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem,
                                                 const AttentionInputs& in) {
  auto sizes = validate_attention(problem, &in, ScoreMemory::query_tiles_with_mask);
  if (!sizes) return sizes.error();
  const AttentionSizes& z = sizes.value();
  const BatchLayout layout = validate_shapes(problem.batch).value();
  AttentionResult out = empty_result(z, problem.shape.backward);
  Job job{problem, in, z, problem.shape.effective_scale(), out};
  // One worker's buffers are made when it takes its first unit: a row of few
  // groups uses few workers.
  std::vector<std::unique_ptr<DenseScratch>> scratch(tiles::workers_for(tiles::dense_units(z), tiles::work_of(z)));
  for (int64_t r = 0; r < z.rows; ++r) {
    const RowMask mask = explicit_mask(problem.batch, layout, r, /*with_window=*/true);
    const auto blocks = attended_key_blocks(mask);
    const std::vector<TileGroup> groups = independent_tile_groups(blocks);
    const int64_t units = int64_t(groups.size()) * z.heads_kv;
    tiles::for_each_unit(units, std::min(int64_t(scratch.size()), units), [&](int64_t unit, int64_t w) {
      if (!scratch[w]) scratch[w] = std::make_unique<DenseScratch>(z.q_len, z.kv_len, z.head_dim);
      dense_unit(job, mask, blocks, groups[unit / z.heads_kv], r, unit % z.heads_kv, *scratch[w]);
    });
  }
  return finite_or_error(std::move(out));
}

// ---------------------------------------------------------------------------
// Per-document attention
// ---------------------------------------------------------------------------

namespace {

// One compacted document: global (THD) token index of its first q / kv token
// and the lengths of its trimmed runs.
struct DocRuns {
  int64_t q0 = 0, lq = 0, kv0 = 0, lkv = 0;
};

// One worker's per-document buffers: the document's K, V of one kv head and
// their dK, dV.
struct DocScratch {
  Scratch tile;
  Matrix k, v, dk, dv;  // [longest kv run, D]
  DocScratch(int64_t max_queries, int64_t max_keys, int64_t dim)
      : tile(std::min(kTileRows, max_queries), max_keys, dim), k(max_keys, dim), v(max_keys, dim), dk(max_keys, dim), dv(max_keys, dim) {}
};

struct Documents {
  std::vector<DocRuns> runs;
  std::vector<int64_t> first_of_row;  // documents first_of_row[r] .. first_of_row[r + 1] - 1 lie in row r
  // The keys global q token t attends, by the kernels' index rule:
  // key_runs[run_start[t]] .. key_runs[run_start[t + 1] - 1], in key order (one
  // run under every mask kind: causal and window bounds cut a contiguous span).
  std::vector<int64_t> run_start;
  std::vector<KeyRun> key_runs;
  int64_t max_queries = 0, max_keys = 0;
};

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

// The flags of query tile [a0, a0 + m) of document d over the keys it attends,
// from the queries' key runs; returns that span of keys [c0, c1) (empty: none).
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

// One document, kv head g: every query head of the group, every query tile.
void document_unit(Job& job, const Documents& docs, const DocRuns& d, int64_t g, DocScratch& s) {
  const AttentionSizes& z = job.z;
  const int64_t D = z.head_dim;
  const bool backward = job.problem.shape.backward;
  s.k.topRows(d.lkv) = tiles::head_rows(job.in.k, d.kv0, d.lkv, z.heads_kv, g, D);
  s.v.topRows(d.lkv) = tiles::head_rows(job.in.v, d.kv0, d.lkv, z.heads_kv, g, D);
  if (backward) {
    s.dk.topRows(d.lkv).setZero();
    s.dv.topRows(d.lkv).setZero();
  }
  for (int64_t h = g * job.group(); h < (g + 1) * job.group(); ++h)
    for (int64_t a0 = 0; a0 < d.lq; a0 += kTileRows) {
      const int64_t m = std::min(kTileRows, d.lq - a0);
      const KeyRun span = tile_flags(docs, d, a0, m, s.tile.allowed);
      if (span.first >= span.end) continue;  // lse stays -inf, o and dq 0
      const int64_t c0 = span.first, n = span.end - span.first;
      load_queries(s.tile, job, d.q0 + a0, m, h);
      // lse is [R, Hq, Tq]; the document's q run lies inside row q0 / Tq.
      double* lse = job.lse(d.q0 / z.q_len, h, d.q0 % z.q_len + a0);
      tiles::attend_tile(s.tile, m, s.k.middleRows(c0, n), s.v.middleRows(c0, n), job.scale, backward, lse,
                         s.dk.middleRows(c0, n), s.dv.middleRows(c0, n));
      store_queries(s.tile, job, d.q0 + a0, m, h);
    }
  if (!backward) return;
  tiles::head_rows(job.out.grads->dk, d.kv0, d.lkv, z.heads_kv, g, D) = s.dk.topRows(d.lkv);
  tiles::head_rows(job.out.grads->dv, d.kv0, d.lkv, z.heads_kv, g, D) = s.dv.topRows(d.lkv);
}

}  // namespace

Expected<AttentionResult> attention_per_document(const AttentionProblem& problem,
                                                 const AttentionInputs& in) {
  auto sizes = validate_attention(problem, &in, ScoreMemory::query_tiles);
  if (!sizes) return sizes.error();
  auto md = metadata(problem.batch);
  if (!md) return md.error();
  const AttentionSizes& z = sizes.value();
  AttentionResult out = empty_result(z, problem.shape.backward);
  Job job{problem, in, z, problem.shape.effective_scale(), out};
  const Documents docs = documents_of(md.value(), problem.batch, z);
  // Units are (document, kv head): documents have disjoint q and kv runs, so
  // each unit writes its own o, lse, dq, dk, dv entries.
  const int64_t units = int64_t(docs.runs.size()) * z.heads_kv;
  std::vector<std::unique_ptr<DocScratch>> scratch(tiles::workers_for(units, tiles::work_of(z)));
  tiles::for_each_unit(units, int64_t(scratch.size()), [&](int64_t unit, int64_t w) {
    if (!scratch[w]) scratch[w] = std::make_unique<DocScratch>(docs.max_queries, docs.max_keys, z.head_dim);
    document_unit(job, docs, docs.runs[unit / z.heads_kv], unit % z.heads_kv, *scratch[w]);
  });
  return finite_or_error(std::move(out));
}

}  // namespace attn_oracle::ref
