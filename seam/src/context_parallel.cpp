// context_parallel.cpp: context parallelism simulated on the host
// (context_parallel.hpp): rank problems, ring steps merged by lse, and the
// kernel-representable blocks a non-token-level backend gets.
#include "attn_oracle/seam/context_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn_oracle::inline seam {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Error unsupported_error(const std::string& why) { return Error{ErrorCode::unsupported, why}; }

// Slots [first, end) of one side of a row: consecutive row tokens of one document.
struct Run {
  int64_t first = 0, end = 0;
};

std::vector<Run> document_runs(const int64_t* ids, const int64_t* tokens, int64_t len) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < len;) {
    int64_t j = i + 1;
    while (j < len && ids[j] == ids[i] && tokens[j] == tokens[j - 1] + 1) ++j;
    if (ids[i] != 0) runs.push_back({i, j});
    i = j;
  }
  return runs;
}

// One block: some query slots of row `row` against some key slots, one call.
struct Block {
  int64_t row = 0;
  std::vector<int64_t> q_slots, kv_slots;
  MaskKind mask = MaskKind::padding;
};

std::vector<int64_t> span(int64_t first, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t i = first; i < end; ++i) out.push_back(i);
  return out;
}

// The blocks one query run meets in one key run of its document (context_parallel.hpp).
void plan_blocks(const CpRankProblem& rp, int64_t row, const Run& q, const Run& kv, std::vector<Block>& out) {
  const PackedBatch& b = rp.problem.batch;
  const int64_t lq = b.q.segment_ids.shape[1], lkv = b.kv.segment_ids.shape[1];
  const int64_t* qpos = b.q.segment_pos.data.data() + row * lq;
  const int64_t* kpos = b.kv.segment_pos.data.data() + row * lkv;
  const int64_t* qtok = rp.q_tokens.data() + row * lq;
  const int64_t* ktok = rp.kv_tokens.data() + row * lkv;
  const int64_t qp0 = qpos[q.first], qp1 = qpos[q.end - 1];
  if (!is_causal(b.mask) || kpos[kv.end - 1] <= qp0) {
    out.push_back({row, span(q.first, q.end), span(kv.first, kv.end), MaskKind::padding});
    return;
  }
  if (kpos[kv.first] > qp1) return;
  if (ktok[kv.first] <= qtok[q.first] && qtok[q.end - 1] <= ktok[kv.end - 1]) {
    const int64_t last = kv.first + (qtok[q.end - 1] - ktok[kv.first]);
    out.push_back({row, span(q.first, q.end), span(kv.first, last + 1), MaskKind::causal_bottom_right});
    return;
  }
  for (int64_t i = q.first; i < q.end; ++i) {
    int64_t end = kv.first;
    while (end < kv.end && kpos[end] <= qpos[i]) ++end;
    if (end > kv.first) out.push_back({row, {i}, span(kv.first, end), MaskKind::padding});
  }
}

std::vector<Block> plan(const CpRankProblem& rp) {
  const PackedBatch& b = rp.problem.batch;
  const int64_t rows = b.q.segment_ids.shape[0], lq = b.q.segment_ids.shape[1], lkv = b.kv.segment_ids.shape[1];
  std::vector<Block> blocks;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* qids = b.q.segment_ids.data.data() + r * lq;
    const int64_t* kids = b.kv.segment_ids.data.data() + r * lkv;
    const std::vector<Run> kruns = document_runs(kids, rp.kv_tokens.data() + r * lkv, lkv);
    for (const Run& q : document_runs(qids, rp.q_tokens.data() + r * lq, lq))
      for (const Run& kv : kruns)
        if (kids[kv.first] == qids[q.first]) plan_blocks(rp, r, q, kv, blocks);
  }
  return blocks;
}

// rows of `values` ([R, L, width]) at row `row`'s `slots`, and back.
std::vector<double> take(const std::vector<double>& values, int64_t len, int64_t width, int64_t row,
                         const std::vector<int64_t>& slots) {
  std::vector<double> out;
  if (values.empty()) return out;
  for (int64_t s : slots) {
    const auto from = values.begin() + (row * len + s) * width;
    out.insert(out.end(), from, from + width);
  }
  return out;
}

void add_into(std::vector<double>& values, int64_t len, int64_t width, int64_t row, const std::vector<int64_t>& slots,
              const std::vector<double>& part) {
  for (size_t i = 0; i < slots.size(); ++i)
    for (int64_t w = 0; w < width; ++w) values[(row * len + slots[i]) * width + w] += part[i * width + w];
}

AttentionProblem block_problem(const Block& blk, const CpRankProblem& rp) {
  const PackedBatch& b = rp.problem.batch;
  const int64_t lq = b.q.segment_ids.shape[1], lkv = b.kv.segment_ids.shape[1];
  auto side = [&](const PackedSide& from, int64_t len, const std::vector<int64_t>& slots) {
    PackedSide s{IntArray::filled({1, static_cast<int64_t>(slots.size())}, 1),
                 IntArray::filled({1, static_cast<int64_t>(slots.size())}, 0)};
    for (size_t i = 0; i < slots.size(); ++i) s.segment_pos.data[i] = from.segment_pos.data[blk.row * len + slots[i]];
    return s;
  };
  AttentionProblem p;
  p.batch.q = side(b.q, lq, blk.q_slots);
  p.batch.kv = side(b.kv, lkv, blk.kv_slots);
  p.batch.mask = blk.mask;
  p.batch.max_segments = 1;
  p.shape = rp.problem.shape;
  return p;
}

// Where row token t of each row sits among the rank-major slots.
std::vector<int64_t> slots_of(const std::vector<int64_t>& perm, int64_t t_len) {
  std::vector<int64_t> slot(perm.size());
  for (size_t s = 0; s < perm.size(); ++s) slot[s / t_len * t_len + perm[s]] = static_cast<int64_t>(s % t_len);
  return slot;
}

}  // namespace

std::optional<std::string> SimulatedContextParallel::unsupported(const CpLayout&, const AttentionProblem& problem) {
  if (auto why = attention_.unsupported(problem)) return why;
  if (!attention_.token_level_mask() && problem.batch.window != Window{})
    return "a window under context parallelism: this backend's kernels see blocks without positions, and a window "
           "counts positions";
  return std::nullopt;
}

std::optional<double> SimulatedContextParallel::balance_bound(const CpLayout& l, const AttentionProblem& p) {
  if (l.strategy == CpStrategy::all_to_all) return 1.0;
  const PackedBatch& b = p.batch;
  if (!is_causal(b.mask) || b.window != Window{} || b.q.segment_ids.rank() != 2) return std::nullopt;
  const std::vector<int64_t>& ids = b.q.segment_ids.data;
  if (std::find(ids.begin(), ids.end(), 0) != ids.end()) return std::nullopt;
  if (l.balance == CpBalance::head_tail) return 1.0;
  const int64_t t = b.q.segment_ids.shape[1];
  if (l.balance != CpBalance::dual_chunk_swap) return std::nullopt;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != ids[i / t * t]) return std::nullopt;  // one document a row
  return 1.0;
}

Expected<CpRankProblem> SimulatedContextParallel::rank_problem(const CpLayout& layout, const AttentionProblem& problem,
                                                               int64_t rank, int64_t step) {
  const Expected<std::vector<int64_t>> perm = permutation(layout, problem);
  if (!perm) return perm.error();
  if (rank < 0 || rank >= layout.cp || step < 0 || step >= cp_steps(layout))
    return unsupported_error("rank " + std::to_string(rank) + ", step " + std::to_string(step) + " of a layout of " +
                             std::to_string(layout.cp) + " ranks and " + std::to_string(cp_steps(layout)) + " steps");
  return cp_rank_problem(layout, problem, perm.value(), rank, step);
}

Expected<Metadata> SimulatedContextParallel::rank_metadata(const CpLayout& layout, const AttentionProblem& problem,
                                                           int64_t rank, int64_t step) {
  const Expected<CpRankProblem> rp = rank_problem(layout, problem, rank, step);
  if (!rp) return rp.error();
  return metadata_.metadata(rp->problem.batch);
}

Expected<AttentionResult> SimulatedContextParallel::rank_attention(const CpLayout& layout,
                                                                   const AttentionProblem& problem,
                                                                   const AttentionInputs& inputs, int64_t rank,
                                                                   int64_t step) {
  Expected<CpRankProblem> rp = rank_problem(layout, problem, rank, step);
  if (!rp) return rp.error();
  CpRankProblem forward = std::move(rp).value();
  forward.problem.shape.backward = false;
  AttentionInputs in = cp_rank_inputs(forward, problem, inputs);
  in.d_o.clear();
  return call(forward, in);
}

Expected<AttentionResult> SimulatedContextParallel::call(const CpRankProblem& rp, const AttentionInputs& inputs) {
  if (attention_.token_level_mask()) return attention_.attention(rp.problem, inputs);
  return call_in_blocks(rp, inputs);
}

Expected<AttentionResult> SimulatedContextParallel::call_in_blocks(const CpRankProblem& rp,
                                                                   const AttentionInputs& inputs) {
  const AttentionShape& shape = rp.problem.shape;
  const int64_t rows = rp.problem.batch.q.segment_ids.shape[0];
  const int64_t lq = rp.problem.batch.q.segment_ids.shape[1], lkv = rp.problem.batch.kv.segment_ids.shape[1];
  const int64_t hq = shape.heads_q, hkv = shape.heads_kv, d = shape.head_dim;
  const int64_t qw = hq * d, kw = hkv * d;
  AttentionResult out;
  out.o.assign(rows * lq * qw, 0.0);
  out.lse.assign(rows * hq * lq, kNegInf);
  if (shape.backward)
    out.grads = AttentionGradients{std::vector<double>(rows * lq * qw, 0.0), std::vector<double>(rows * lkv * kw, 0.0),
                                   std::vector<double>(rows * lkv * kw, 0.0)};
  std::vector<int> blocks_of_query(rows * lq, 0);
  for (const Block& blk : plan(rp)) {
    const AttentionProblem p = block_problem(blk, rp);
    const AttentionInputs in{take(inputs.q, lq, qw, blk.row, blk.q_slots), take(inputs.k, lkv, kw, blk.row, blk.kv_slots),
                             take(inputs.v, lkv, kw, blk.row, blk.kv_slots),
                             take(inputs.d_o, lq, qw, blk.row, blk.q_slots)};
    const Expected<AttentionResult> r = attention_.attention(p, in);
    if (!r) return r.error();
    const int64_t n = static_cast<int64_t>(blk.q_slots.size());
    std::vector<double> o_part(out.o.size(), 0.0), lse_part(out.lse.size(), kNegInf);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = blk.q_slots[i];
      std::copy_n(r->o.begin() + i * qw, qw, o_part.begin() + (blk.row * lq + slot) * qw);
      for (int64_t h = 0; h < hq; ++h) lse_part[(blk.row * hq + h) * lq + slot] = r->lse[h * n + i];
      if (shape.backward && ++blocks_of_query[blk.row * lq + slot] > 1)
        return unsupported_error("a backward whose query meets several key runs of its document");
    }
    merge_partial(out.o, out.lse, o_part, lse_part, rows, lq, hq, d);
    if (shape.backward) {
      add_into(out.grads->dq, lq, qw, blk.row, blk.q_slots, r->grads->dq);
      add_into(out.grads->dk, lkv, kw, blk.row, blk.kv_slots, r->grads->dk);
      add_into(out.grads->dv, lkv, kw, blk.row, blk.kv_slots, r->grads->dv);
    }
  }
  return out;
}

void SimulatedContextParallel::merge_partial(std::vector<double>& o, std::vector<double>& lse,
                                             const std::vector<double>& o_part, const std::vector<double>& lse_part,
                                             int64_t rows, int64_t tokens, int64_t heads, int64_t d) {
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        double& acc = lse[(b * heads + h) * tokens + t];
        const double part = lse_part[(b * heads + h) * tokens + t];
        if (part == kNegInf) continue;
        const double hi = std::max(acc, part), lo = std::min(acc, part);
        const double total = hi + std::log1p(std::exp(lo - hi));
        const double keep = std::exp(acc - total), take_part = std::exp(part - total);
        double* out = o.data() + ((b * tokens + t) * heads + h) * d;
        const double* in = o_part.data() + ((b * tokens + t) * heads + h) * d;
        for (int64_t i = 0; i < d; ++i) out[i] = keep * out[i] + take_part * in[i];
        acc = total;
      }
}

Expected<AttentionResult> SimulatedContextParallel::cp_attention(const CpLayout& layout, const AttentionProblem& problem,
                                                                 const AttentionInputs& inputs) {
  const Expected<std::vector<int64_t>> perm = permutation(layout, problem);
  if (!perm) return perm.error();
  const int64_t rows = problem.batch.q.segment_ids.shape[0], t_len = problem.batch.q.segment_ids.shape[1];
  const int64_t local = cp_local_tokens(layout, t_len), d = problem.shape.head_dim;
  const int64_t hq = problem.shape.heads_q, hkv = problem.shape.heads_kv;
  const bool backward = problem.shape.backward;
  const std::vector<int64_t> slot = slots_of(perm.value(), t_len);
  AttentionResult out;
  out.o.assign(rows * t_len * hq * d, 0.0);
  out.lse.assign(rows * hq * t_len, kNegInf);
  std::vector<double> dq(backward ? out.o.size() : 0), dk(backward ? rows * t_len * hkv * d : 0), dv(dk.size());
  // Writes a rank call's [B, Lq, h', D] queries (and [B, Lkv, hkv', D] keys) into the rank-major outputs.
  auto place = [&](const CpRankProblem& rp, const AttentionResult& r, bool forward, bool grads) {
    const int64_t lq = rp.problem.batch.q.segment_ids.shape[1], lkv = rp.problem.batch.kv.segment_ids.shape[1];
    const int64_t h = rp.problem.shape.heads_q, hk = rp.problem.shape.heads_kv;
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t j = 0; j < lq; ++j) {
        const int64_t s = b * t_len + slot[b * t_len + rp.q_tokens[b * lq + j]];
        for (int64_t x = 0; x < h; ++x) {
          if (forward) out.lse[(b * hq + rp.q_head0 + x) * t_len + s % t_len] = r.lse[(b * h + x) * lq + j];
          for (int64_t i = 0; i < d; ++i) {
            const int64_t to = (s * hq + rp.q_head0 + x) * d + i, from = ((b * lq + j) * h + x) * d + i;
            if (forward) out.o[to] = r.o[from];
            if (grads) dq[to] = r.grads->dq[from];
          }
        }
      }
      for (int64_t j = 0; grads && j < lkv; ++j) {
        const int64_t s = b * t_len + slot[b * t_len + rp.kv_tokens[b * lkv + j]];
        for (int64_t x = 0; x < hk * d; ++x) {
          dk[(s * hkv + rp.kv_head0) * d + x] += r.grads->dk[(b * lkv + j) * hk * d + x];
          dv[(s * hkv + rp.kv_head0) * d + x] += r.grads->dv[(b * lkv + j) * hk * d + x];
        }
      }
    }
  };
  CpLayout gathered = layout;
  if (layout.strategy == CpStrategy::ring) gathered.strategy = CpStrategy::all_gather;
  for (int64_t rank = 0; rank < layout.cp; ++rank) {
    if (layout.strategy == CpStrategy::ring) {
      AttentionResult acc;
      CpRankProblem first;
      for (int64_t step = 0; step < layout.cp; ++step) {
        const Expected<AttentionResult> part = rank_attention(layout, problem, inputs, rank, step);
        if (!part) return part.error();
        if (step == 0) {
          acc = part.value();
          first = rank_problem(layout, problem, rank, 0).value();
        } else {
          merge_partial(acc.o, acc.lse, part->o, part->lse, rows, local, hq, d);
        }
      }
      place(first, acc, /*forward=*/true, /*grads=*/false);
      if (!backward) continue;
    }
    const Expected<CpRankProblem> rp = rank_problem(gathered, problem, rank, 0);
    if (!rp) return rp.error();
    const Expected<AttentionResult> r = call(rp.value(), cp_rank_inputs(rp.value(), problem, inputs));
    if (!r) return r.error();
    place(rp.value(), r.value(), layout.strategy != CpStrategy::ring, backward);
  }
  if (backward) out.grads = AttentionGradients{std::move(dq), std::move(dk), std::move(dv)};
  return out;
}

}  // namespace attn_oracle::seam
