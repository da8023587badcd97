// blocked_attention.hpp (internal to attn_oracle_reference): the two float64
// references of reference_attention.cpp as templates over the steps of the tile
// arithmetic (attention_tiles.hpp). The library instantiates each once, with
// tiles::ExactTile, as ref::attention_dense_masked and ref::attention_per_document;
// tests/planted/tile_faults.cpp instantiates them again with planted faults. What
// does not touch a tile is compiled once, in reference_attention.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "attention_tiles.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::ref::blocked {

using tiles::Flags;
using tiles::kNegInf;
using tiles::kTileRows;
using tiles::Matrix;
using tiles::Scratch;

// Outputs before anything is attended: o = 0, lse = -inf, gradients 0.
AttentionResult empty_result(const AttentionSizes& z, bool backward);

// The contract has no NaN and no infinity but lse's -inf. Validation bounds the
// magnitudes (value_overflow), so this is a guard: a result that breaks it is
// refused with the first bad element rather than handed out.
Expected<AttentionResult> finite_or_error(AttentionResult out);

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
void load_queries(Scratch& s, const Job& job, int64_t q0, int64_t m, int64_t h);
// Stores the tile's o (and dq) rows.
void store_queries(const Scratch& s, Job& job, int64_t q0, int64_t m, int64_t h);

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
std::vector<std::vector<int64_t>> attended_key_blocks(const RowMask& mask);

// Query tiles whose attended key blocks meet, joined (over tiles in order, by
// the span of their blocks: a document and any it shares a block with). No key
// block is attended from two groups, so each group's dK, dV rows are summed by
// one worker, in head and then tile order, as one worker sums the whole row:
// results are the same bits for any number of workers.
struct TileGroup {
  std::vector<int64_t> tiles;
  int64_t first_block = 0, end_block = 0;
};
std::vector<TileGroup> independent_tile_groups(const std::vector<std::vector<int64_t>>& blocks);

// Copies the keys and values of the attended blocks into s.k, s.v and the mask's
// entries of query tile [a0, a0 + m) for them into the tile's flags; returns
// how many keys that is.
int64_t gather_keys(const RowMask& mask, const std::vector<int64_t>& blocks, int64_t a0, int64_t m,
                    const tiles::ConstStridedMap& k, const tiles::ConstStridedMap& v, DenseScratch& s);

// Adds the gathered keys' dK, dV (s.dk, s.dv) to the row's (s.row_dk, s.row_dv).
void scatter_key_gradients(const std::vector<int64_t>& blocks, int64_t kv_len, DenseScratch& s);

// Row r, kv head g, one group of tiles: every query head of the group, every tile of it.
template <class Steps>
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
      tiles::attend_tile<Steps>(s.tile, m, s.k.topRows(n), s.v.topRows(n), job.scale, backward, job.lse(r, h, a0),
                                s.dk.topRows(n), s.dv.topRows(n));
      store_queries(s.tile, job, r * Tq + a0, m, h);
      if (backward) scatter_key_gradients(blocks[t], Tkv, s);
    }
  if (!backward) return;
  tiles::head_rows(job.out.grads->dk, r * Tkv + j0, keys, z.heads_kv, g, D) = s.row_dk.middleRows(j0, keys);
  tiles::head_rows(job.out.grads->dv, r * Tkv + j0, keys, z.heads_kv, g, D) = s.row_dv.middleRows(j0, keys);
}

// The dense reference (reference_attention.cpp) with the tile steps `Steps`.
template <class Steps>
Expected<AttentionResult> dense_masked(const AttentionProblem& problem, const AttentionInputs& in) {
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
      dense_unit<Steps>(job, mask, blocks, groups[unit / z.heads_kv], r, unit % z.heads_kv, *scratch[w]);
    });
  }
  return finite_or_error(std::move(out));
}

// ---------------------------------------------------------------------------
// Per-document attention
// ---------------------------------------------------------------------------

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

// The metadata's documents and the key runs each query attends by the index rule.
Documents documents_of(const Metadata& md, const PackedBatch& b, const AttentionSizes& z);

// The flags of query tile [a0, a0 + m) of document d over the keys it attends,
// from the queries' key runs; returns that span of keys [c0, c1) (empty: none).
KeyRun tile_flags(const Documents& docs, const DocRuns& d, int64_t a0, int64_t m, Flags& allowed);

// One document, kv head g: every query head of the group, every query tile.
template <class Steps>
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
      tiles::attend_tile<Steps>(s.tile, m, s.k.middleRows(c0, n), s.v.middleRows(c0, n), job.scale, backward, lse,
                                s.dk.middleRows(c0, n), s.dv.middleRows(c0, n));
      store_queries(s.tile, job, d.q0 + a0, m, h);
    }
  if (!backward) return;
  tiles::head_rows(job.out.grads->dk, d.kv0, d.lkv, z.heads_kv, g, D) = s.dk.topRows(d.lkv);
  tiles::head_rows(job.out.grads->dv, d.kv0, d.lkv, z.heads_kv, g, D) = s.dv.topRows(d.lkv);
}

// The per-document reference (reference_attention.cpp) with the tile steps `Steps`.
template <class Steps>
Expected<AttentionResult> per_document(const AttentionProblem& problem, const AttentionInputs& in) {
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
    document_unit<Steps>(job, docs, docs.runs[unit / z.heads_kv], unit % z.heads_kv, *scratch[w]);
  });
  return finite_or_error(std::move(out));
}

}  // namespace attn_oracle::ref::blocked
