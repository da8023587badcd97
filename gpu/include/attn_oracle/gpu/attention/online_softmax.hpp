// online_softmax.hpp: the row operations of the flash forward and backward,
// destination first, shared by the CUDA kernels (a lane per row of a tile in
// shared memory) and the CPU twin (a loop over rows). Scores arrive already
// scaled; masked entries are -inf.
#pragma once

#include <cmath>

#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

// The running softmax state of one query row.
struct SoftmaxRow {
  float m = -INFINITY;  // running max of the scores seen
  float l = 0.0f;       // running sum of exp(s - m)
};

// Folds one tile of scores s[0..n) into the state; writes p = exp(s - m_new)
// into s (in place: s is overwritten) and returns the factor the row's
// accumulated output must be multiplied by before p . V is added.
ATTN_HD float online_softmax_update_inplace(SoftmaxRow& row, float* s, int n) {
  float m_new = row.m;
  for (int j = 0; j < n; ++j) m_new = s[j] > m_new ? s[j] : m_new;
  if (m_new == -INFINITY) {  // nothing attended yet: keep l = 0, p = 0
    for (int j = 0; j < n; ++j) s[j] = 0.0f;
    return 1.0f;
  }
  const float alpha = row.m == -INFINITY ? 0.0f : expf(row.m - m_new);
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
    sum += s[j];
  }
  row.l = row.l * alpha + sum;
  row.m = m_new;
  return alpha;
}

ATTN_HD void rescale_row(float* o, int d, float alpha) {
  for (int c = 0; c < d; ++c) o[c] *= alpha;
}

// o /= l; a row that attended nothing stays 0 (never 0/0).
ATTN_HD void finalize_row(float* o, int d, const SoftmaxRow& row) {
  const float inv = row.l > 0.0f ? 1.0f / row.l : 0.0f;
  for (int c = 0; c < d; ++c) o[c] *= inv;
}

ATTN_HD float row_lse(const SoftmaxRow& row) { return row.l > 0.0f ? row.m + logf(row.l) : -INFINITY; }

// ------------------------------------------------------------------ backward rows
// delta_i = sum_c dO[i, c] * O[i, c]
ATTN_HD float row_delta(const float* d_o, const float* o, int d) {
  float acc = 0.0f;
  for (int c = 0; c < d; ++c) acc += d_o[c] * o[c];
  return acc;
}

// p = exp(s - lse) for allowed entries (s already scaled, -inf when masked).
ATTN_HD void probabilities_from_lse_inplace(float* s, int n, float lse) {
  for (int j = 0; j < n; ++j) s[j] = (s[j] == -INFINITY || lse == -INFINITY) ? 0.0f : expf(s[j] - lse);
}

// dS = P * (dP - delta), in place over dP.
ATTN_HD void softmax_grad_row_inplace(float* dp, const float* p, int n, float delta) {
  for (int j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

}  // namespace attn_oracle::gpu
