// context_parallel.cpp: the oracle of context parallelism (context_parallel.hpp).
#include "attn_oracle/reference/context_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle::ref {
namespace {

// The chunk of 2*cp a token at offset `i` of a span of `n` tokens falls in, and
// the rank that chunk belongs to (chunks c and 2*cp-1-c to rank c).
int64_t head_tail_rank(int64_t i, int64_t n, int64_t cp) {
  const int64_t chunk = i / (n / (2 * cp));
  return chunk < cp ? chunk : 2 * cp - 1 - chunk;
}

// Whether a head_tail span starts at token t: the row's first token, or a
// document's first (padding belongs to the document before it).
bool span_starts(const int64_t* ids, int64_t t) { return t == 0 || (ids[t] != 0 && ids[t] != ids[t - 1]); }

// The first token of the span that t belongs to, and its length.
std::pair<int64_t, int64_t> span_of(const int64_t* ids, int64_t t_len, int64_t t) {
  int64_t a = t, b = t + 1;
  while (!span_starts(ids, a)) --a;
  while (b < t_len && !span_starts(ids, b)) ++b;
  return {a, b - a};
}

// The rank a layout gives token t of a row.
int64_t rank_of(const CpLayout& l, const int64_t* ids, int64_t t_len, int64_t t) {
  switch (l.balance) {
    case CpBalance::contiguous: return t / (t_len / l.cp);
    case CpBalance::dual_chunk_swap: return head_tail_rank(t, t_len, l.cp);
    case CpBalance::striped: return (t / l.stripe) % l.cp;
    case CpBalance::head_tail: {
      const auto [start, n] = span_of(ids, t_len, t);
      return head_tail_rank(t - start, n, l.cp);
    }
    case CpBalance::explicit_indices: break;
  }
  return 0;
}

}  // namespace

Expected<std::vector<int64_t>> cp_permutation(const CpLayout& l, const AttentionProblem& p) {
  if (auto e = validate_cp(l, p)) return *e;
  if (l.balance == CpBalance::explicit_indices) return l.indices.data;
  const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
  std::vector<int64_t> perm(rows * t_len);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* ids = p.batch.q.segment_ids.data.data() + b * t_len;
    std::vector<int64_t> rank(t_len);
    for (int64_t t = 0; t < t_len; ++t) rank[t] = rank_of(l, ids, t_len, t);
    int64_t* row = perm.data() + b * t_len;
    std::iota(row, row + t_len, 0);  // a stable sort by rank keeps row order within a rank
    std::stable_sort(row, row + t_len, [&](int64_t x, int64_t y) { return rank[x] < rank[y]; });
  }
  return perm;
}

Expected<CpRankProblem> cp_rank_problem(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) {
  const Expected<std::vector<int64_t>> perm = ref::cp_permutation(l, p);
  if (!perm) return perm.error();
  if (rank < 0 || rank >= l.cp || step < 0 || step >= cp_steps(l))
    return Error{ErrorCode::unsupported, "rank " + std::to_string(rank) + ", step " + std::to_string(step) +
                                             " is outside the layout's " + std::to_string(l.cp) + " ranks and " +
                                             std::to_string(cp_steps(l)) + " steps"};
  return attn_oracle::cp_rank_problem(l, p, perm.value(), rank, step);
}

Expected<Metadata> cp_rank_metadata(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) {
  const Expected<CpRankProblem> rp = ref::cp_rank_problem(l, p, rank, step);
  if (!rp) return rp.error();
  return metadata(rp->problem.batch);
}

std::vector<int64_t> cp_rank_pairs(const CpLayout& l, const AttentionProblem& p, const std::vector<int64_t>& perm) {
  std::vector<int64_t> pairs(std::max<int64_t>(l.cp, 1), 0);
  const Expected<BatchLayout> layout = validate(p.batch);
  if (!layout || l.cp < 1) return pairs;
  const int64_t rows = layout->rows(), t_len = layout->q_len, local = cp_local_tokens(l, t_len);
  int64_t total = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const RowMask mask = explicit_mask(p.batch, layout.value(), b, /*with_window=*/true);
    for (int64_t slot = 0; slot < t_len; ++slot) {
      const int64_t t = perm[b * t_len + slot];
      int64_t keys = 0;
      for (const KeyRun* run = mask.keys_begin(t); run != mask.keys_end(t); ++run) keys += run->end - run->first;
      pairs[std::min(slot / std::max<int64_t>(local, 1), l.cp - 1)] += keys;
      total += keys;
    }
  }
  if (l.strategy == CpStrategy::all_to_all) std::fill(pairs.begin(), pairs.end(), total / l.cp);
  return pairs;
}

double cp_imbalance(const std::vector<int64_t>& pairs) {
  const int64_t total = std::accumulate(pairs.begin(), pairs.end(), int64_t{0});
  if (total == 0 || pairs.empty()) return 1.0;
  const double mean = static_cast<double>(total) / static_cast<double>(pairs.size());
  return static_cast<double>(*std::max_element(pairs.begin(), pairs.end())) / mean;
}

void merge_by_lse(std::vector<double>& o, std::vector<double>& lse, const std::vector<double>& o_part,
                  const std::vector<double>& lse_part, int64_t rows, int64_t tokens, int64_t heads, int64_t d) {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t li = (b * heads + h) * tokens + t;
        const double a = lse[li], c = lse_part[li];
        if (c == -inf) continue;
        const double m = std::max(a, c);
        const double merged = m + std::log(std::exp(a - m) + std::exp(c - m));
        const double wa = a == -inf ? 0.0 : std::exp(a - merged), wc = std::exp(c - merged);
        double* out = o.data() + ((b * tokens + t) * heads + h) * d;
        const double* part = o_part.data() + ((b * tokens + t) * heads + h) * d;
        for (int64_t i = 0; i < d; ++i) out[i] = wa * out[i] + wc * part[i];
        lse[li] = merged;
      }
}

}  // namespace attn_oracle::ref
