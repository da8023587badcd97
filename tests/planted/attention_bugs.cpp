// attention_bugs.cpp: planted attention bugs, each the reference with one
// real-world mistake applied.
#include <cmath>
#include <limits>

#include "attn_oracle/validate.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {
namespace {

// Bottom-right alignment dropped: bottom-right kinds computed as top-left causal.
Expected<AttentionResult> top_left_for_bottom_right(const AttentionProblem& problem, const AttentionInputs& in) {
  AttentionProblem p = problem;
  if (p.batch.mask == MaskKind::causal_bottom_right) p.batch.mask = MaskKind::causal;
  if (p.batch.mask == MaskKind::padding_causal_bottom_right) p.batch.mask = MaskKind::padding_causal;
  return ref::attention_dense_masked(p, in);
}

// Window left bound exclusive instead of inclusive (pos_q - left < pos_kv).
Expected<AttentionResult> exclusive_left_window(const AttentionProblem& problem, const AttentionInputs& in) {
  AttentionProblem p = problem;
  if (p.batch.window.left > 0) --p.batch.window.left;
  return ref::attention_dense_masked(p, in);
}

// Softmax of an empty key set computed as 0/0: NaN output, NaN lse.
Expected<AttentionResult> nan_for_empty_rows(const AttentionProblem& problem, const AttentionInputs& in) {
  auto r = ref::attention_dense_masked(problem, in);
  if (!r) return r;
  AttentionResult out = r.value();
  const int64_t H = problem.shape.heads_q, D = problem.shape.head_dim;
  const int64_t tq = problem.batch.q.segment_ids.shape.back();
  for (size_t at = 0; at < out.lse.size(); ++at) {
    if (!std::isinf(out.lse[at])) continue;
    const int64_t r_h = at / tq, i = at % tq, row = r_h / H, h = r_h % H;
    out.lse[at] = std::numeric_limits<double>::quiet_NaN();
    for (int64_t c = 0; c < D; ++c) out.o[((row * tq + i) * H + h) * D + c] = std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

// Online-softmax state carried from one document into the next one of the row:
// a document's denominator also holds the previous document's last row sum.
Expected<AttentionResult> softmax_state_leaks(const AttentionProblem& problem, const AttentionInputs& in) {
  auto r = ref::attention_dense_masked(problem, in);
  if (!r) return r;
  AttentionResult out = r.value();
  const BatchLayout l = validate_shapes(problem.batch).value();
  const int64_t H = problem.shape.heads_q, D = problem.shape.head_dim, tq = l.q_len;
  for (int64_t row = 0; row < l.rows(); ++row) {
    const RowView q = side_row(problem.batch.q, l.q_extra, l, row);
    for (int64_t h = 0; h < H; ++h) {
      double carried = -INFINITY, last_lse = -INFINITY;
      for (int64_t i = 0; i < tq; ++i) {
        if (i > 0 && q.ids[i] != q.ids[i - 1]) carried = last_lse;  // not reset
        double& lse = out.lse[(row * H + h) * tq + i];
        if (std::isinf(lse)) continue;
        last_lse = lse;
        const double merged = std::max(lse, carried) + std::log1p(std::exp(-std::fabs(lse - carried)));
        for (int64_t c = 0; c < D; ++c) out.o[((row * tq + i) * H + h) * D + c] *= std::exp(lse - merged);
        lse = merged;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<PlantedBug> attention_bugs() {
  using Fn = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);
  auto bug = [](std::string name, std::string property, Fn f) {
    return PlantedBug{name, property, [name, f] { return attention_backend("planted-" + name, f); }};
  };
  return {
      bug("top_left_for_bottom_right", "attention/matchesReference", top_left_for_bottom_right),
      bug("exclusive_left_window", "attention/matchesPerDocumentReference", exclusive_left_window),
      bug("nan_for_empty_rows", "attention/unattendedTokensAreExactlyZero", nan_for_empty_rows),
      bug("softmax_state_leaks", "attention/documentPermutationInvariance", softmax_state_leaks),
  };
}

}  // namespace attn_oracle::planted
