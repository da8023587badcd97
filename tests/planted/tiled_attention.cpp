// tiled_attention.cpp: the planted tiled forward of tiled_attention.hpp, written
// on the kernels' own tile and row functions so that a planted bug sits exactly
// where a kernel's would.
#include "planted/tiled_attention.hpp"

#include "planted/planted_backends.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/attention/numeric.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::planted {
namespace {


gpu::AttentionFwdParams fwd_params(const AttentionProblem& problem, const Metadata& md,
                                   const AttentionSizes& sizes) {
  gpu::AttentionFwdParams p;
  p.cu_seqlens_q = md.cu_seqlens_q.data();
  p.cu_seqlens_kv = md.cu_seqlens_kv.data();
  p.ragged_offsets_q = md.ragged_offsets_q.data();
  p.ragged_offsets_kv = md.ragged_offsets_kv.data();
  p.docs = md.documents();
  p.total_q = sizes.rows * sizes.q_len;
  p.total_kv = sizes.rows * sizes.kv_len;
  p.heads_q = static_cast<int>(problem.shape.heads_q);
  p.heads_kv = static_cast<int>(problem.shape.heads_kv);
  p.head_dim = static_cast<int>(problem.shape.head_dim);
  p.scale = static_cast<float>(problem.shape.effective_scale());
  p.mask = static_cast<int>(problem.batch.mask);  // MaskKind and MaskCode share their order
  p.window_left = problem.batch.window.left;
  p.window_right = problem.batch.window.right;
  p.dtype = static_cast<int>(problem.shape.dtype);  // Dtype and AttnDtype too
  return p;
}

// x rounded towards zero to the 16-bit dtype (fp32 unchanged): the low mantissa bits dropped.
float truncated(float x, int dtype) {
  if (dtype == gpu::kFp32 || !std::isfinite(x)) return x;
  const int kept = dtype == gpu::kBf16 ? 7 : 10;
  int exponent = 0;
  const float m = std::frexp(x, &exponent);  // x = m * 2^exponent, 0.5 <= |m| < 1
  return std::ldexp(std::trunc(std::ldexp(m, kept + 1)), exponent - kept - 1);
}

// One query row of one head: every visited kv tile folded into the running state.
struct RowJob {
  const gpu::AttentionFwdParams& p;
  const AttentionInputs& in;
  const TiledBugs& bugs;
  gpu::DocSpan span;
  int64_t rule_lq;  // the lq the index rule sees (the document's, unless anchored at the row)
  int h;
};

int tile_keys(const TiledBugs& bugs) { return bugs.kv_tile > 0 ? bugs.kv_tile : kPlantedTileKv; }

// The running softmax of one query row, in the kernels' base-2 domain
// (flash_tile.hpp): the max m of the scores seen and the sum l of 2^(s - m).
struct RowState {
  float m = -INFINITY, l = 0.0f;
};

// Folds the row's kv tiles into its state with the kernels' steps (score_log2,
// rescale_factor, softmax_weight).
void run_row(const RowJob& job, int64_t a, gpu::TileRange tiles, float* acc, RowState& row) {
  const gpu::AttentionFwdParams& p = job.p;
  const int d = p.head_dim, group = p.heads_q / p.heads_kv;
  const int kvh = job.bugs.wide_gqa_group_packed && group > 4 ? (job.h / 4) % p.heads_kv
                                                               : gpu::kv_head_of(job.h, p.heads_q, p.heads_kv);
  const double* q = &job.in.q[((job.span.q0 + a) * p.heads_q + job.h) * d];
  const float scale_log2 = p.scale * gpu::kLog2e;
  const int kv_tile = tile_keys(job.bugs);
  std::vector<float> s(kv_tile);
  for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
    const int64_t b0 = tile * kv_tile;
    const int n = static_cast<int>(std::min<int64_t>(kv_tile, job.span.lkv - b0));
    float row_max = row.m;
    for (int j = 0; j < n; ++j) {
      s[j] = -INFINITY;
      if (!gpu::index_allowed(p.mask, p.window_left, p.window_right, a, b0 + j, job.rule_lq, job.span.lkv)) continue;
      const double* k = &job.in.k[((job.span.kv0 + b0 + j) * p.heads_kv + kvh) * d];
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += static_cast<float>(q[c]) * static_cast<float>(k[c]);
      s[j] = gpu::score_log2(dot, scale_log2);
      row_max = std::max(row_max, s[j]);
    }
    const float alpha = gpu::rescale_factor(row.m, row_max);
    row.m = row_max;
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += s[j] = gpu::softmax_weight(s[j], row_max);
    row.l = row.l * alpha + sum;
    const bool skipped = job.bugs.rescale_skipped || (job.bugs.rescale_skipped_in_one_key_tile && n == 1 && d >= 64);
    if (!skipped)
      for (int c = 0; c < d; ++c) acc[c] *= alpha;
    for (int j = 0; j < n; ++j) {
      const float pj = gpu::round_to(s[j], p.dtype);
      const double* v = &job.in.v[((job.span.kv0 + b0 + j) * p.heads_kv + kvh) * d];
      for (int c = 0; c < d; ++c) acc[c] += pj * static_cast<float>(v[c]);
    }
  }
}

}  // namespace

Expected<AttentionResult> tiled_attention(const AttentionProblem& problem, const AttentionInputs& inputs,
                                          const TiledBugs& bugs) {
  const auto sizes = validate_attention(problem, &inputs);
  if (!sizes) return sizes.error();
  const auto md = ref::metadata(problem.batch);
  if (!md) return md.error();
  const gpu::AttentionFwdParams p = fwd_params(problem, md.value(), sizes.value());
  const int64_t tq = sizes->q_len, d = p.head_dim;

  // Valid tokens of each row on each side: what the row-anchored bug measures from.
  std::vector<int64_t> row_q(sizes->rows, 0), row_kv(sizes->rows, 0);
  for (int64_t doc = 0; doc < p.docs; ++doc) {
    const gpu::DocSpan span = gpu::doc_span(p, doc);
    row_q[span.q0 / tq] += span.lq;
    row_kv[span.q0 / tq] += span.lkv;
  }

  AttentionResult out;
  out.o.assign(sizes->q_elems(), 0.0);
  out.lse.assign(sizes->lse_elems(), -INFINITY);
  std::vector<float> acc(d);
  for (int64_t doc = 0; doc < p.docs; ++doc) {
    const gpu::DocSpan span = gpu::doc_span(p, doc);
    const int64_t r = span.q0 / tq;
    const int64_t rule_lq = bugs.bottom_right_anchored_at_row ? span.lkv - (row_kv[r] - row_q[r]) : span.lq;
    for (int h = 0; h < p.heads_q; ++h) {
      const RowJob job{p, inputs, bugs, span, rule_lq, h};
      for (int64_t a0 = 0; a0 < span.lq; a0 += kPlantedTileQ) {
        const int64_t a1 = std::min<int64_t>(a0 + kPlantedTileQ, span.lq);
        const int kv_tile = tile_keys(bugs);
        gpu::TileRange tiles = gpu::kv_tile_range(p.mask, p.window_left, p.window_right, a0, a1, rule_lq, span.lkv, kv_tile);
        if (bugs.last_partial_kv_tile_skipped) tiles.end = std::min(tiles.end, span.lkv / kv_tile);
        if (bugs.keys_kept > 0) tiles.end = std::min(tiles.end, bugs.keys_kept / kv_tile);
        for (int64_t a = a0; a < a1; ++a) {
          RowState row;
          std::fill(acc.begin(), acc.end(), 0.0f);
          run_row(job, a, tiles, acc.data(), row);
          const float inv = row.l > 0.0f ? 1.0f / row.l : 0.0f;  // a row that attended nothing stays 0
          for (float& x : acc) x *= inv;
          const int64_t t = span.q0 + a;
          const int64_t stored = bugs.wide_head_upper_half_unstored && d >= 64 ? d / 2 : d;
          for (int64_t c = 0; c < stored; ++c)
            out.o[(t * p.heads_q + h) * d + c] = bugs.outputs_truncated ? truncated(acc[c], p.dtype) : gpu::round_to(acc[c], p.dtype);
          out.lse[((t / tq) * p.heads_q + h) * tq + t % tq] = gpu::lse_from_log2(row.m, row.l);
        }
      }
    }
  }
  return with_reference_gradients(std::move(out), problem, inputs);
}

namespace {

class TiledBackend final : public Backend, AttentionCapability {
 public:
  TiledBackend(std::string name, TiledBugs bugs) : name_(std::move(name)), bugs_(bugs) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "planted fp32 tiled forward, 4 x 2 tiles"; }
  AttentionCapability* attention() override { return this; }

  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    if (!validate_attention(problem)) return std::nullopt;  // attention() reports the error
    if (!ref::representability(problem.batch).representable)
      return "not representable: the tiled forward sees only the compacted metadata";
    return std::nullopt;
  }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return tiled_attention(problem, inputs, bugs_);
  }

 private:
  std::string name_;
  TiledBugs bugs_;
};

}  // namespace

std::unique_ptr<Backend> tiled_backend(std::string name, TiledBugs bugs) {
  return std::make_unique<TiledBackend>(std::move(name), bugs);
}

}  // namespace attn_oracle::planted
