// small_seq_rows.hpp: the per-(document, query head) steps of the small-sequence
// kernels (docs/semantics.md#8-small-sequence-problems), shared by the CUDA kernels
// (small_seq_kernels.cu) and the CPU twin (small_seq_twin.cpp).
//
// Work of one (document, kv head) belongs to one warp of kLanes lanes. A lane owns
// the columns lane_column(lane, i) of every head_dim row: pairs of adjacent columns,
// 64 columns per sweep of the warp (one 32-bit load per lane, 128 B per warp). A dot
// product is each lane's partial_dot over its columns in slot order, then a sum over
// the lanes: a butterfly of xor shuffles on the device, the same butterfly over an
// array in the twin (the one step that cannot be shared, so both sit behind a tiny
// policy). Everything after the dot products works on 16 score / probability slots
// that every lane holds whole:
//   forward   s = masked_scores(dots), p = softmax_slots(s), o = sum_j round(p_j) v_j
//   backward  dp_j = dO . v_j, delta = softmax_delta(p, dp), ds = softmax_grad_slots,
//             dq = sum_j round(ds_j) k_j, dk_j = sum_h round(ds_hj) q_h,
//             dv_j = sum_h round(p_hj) dO_h
// (round = to the storage dtype: what a 16-bit operand of the product holds.)
// The mask is docs/semantics.md#2-the-attention-mask on positions with the query's run of length 1,
// so a window or causality may mask every key: then p is all 0, o = 0 and dq = 0.
// Functions never read threadIdx: the kernel maps lanes to threads, the twin to loops.
#pragma once

#include <cmath>
#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"
#include "attn_oracle/gpu/mask_rule.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_params.hpp"

namespace attn_oracle::gpu {

inline constexpr int kLanes = 32;

// Column slots a lane holds for head_dim d (columns past d, only when d is not a
// multiple of 64, hold 0 in the twin; the kernels take multiples of 64).
ATTN_HD int lane_slots(int d) { return 2 * ((d + 2 * kLanes - 1) / (2 * kLanes)); }
ATTN_HD int lane_column(int lane, int i) { return (i >> 1) * (2 * kLanes) + 2 * lane + (i & 1); }

// docs/semantics.md#2-the-attention-mask for one query and key j of a document of `keys` kv tokens:
// mask_rule.hpp's rule on positions, the query's run of length 1.
ATTN_HD bool small_seq_allowed(int mask, int64_t left, int64_t right, int64_t pos_q, int64_t pos_k, int64_t keys) {
  return rule_allows(mask, left, right, pos_q, pos_k, 1, keys);
}

// Bit j set iff key j of document `doc` is attended (j < keys).
ATTN_HD unsigned allowed_keys(const SmallSeqParams& p, int64_t doc) {
  const int keys = p.keys[doc];
  const int64_t pos_q = p.q_pos[doc], k0 = p.first_key[doc];
  unsigned bits = 0;
  for (int j = 0; j < keys; ++j)
    if (small_seq_allowed(p.mask, p.window_left, p.window_right, pos_q, p.kv_pos[k0 + j], keys)) bits |= 1u << j;
  return bits;
}

// One lane's share of a . b: its n column slots in order.
ATTN_HD float partial_dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// s_j = scale * dot_j where key j is attended, -inf elsewhere (masked or past the keys).
ATTN_HD void masked_scores(float s[kSmallSeqSlots], const float dot[kSmallSeqSlots], unsigned allowed, float scale) {
  for (int j = 0; j < kSmallSeqSlots; ++j) s[j] = (allowed >> j) & 1u ? dot[j] * scale : -INFINITY;
}

// p = softmax(s) over the slots: -inf slots get exactly 0, and a row with no
// attended key is all 0 (never 0 / 0).
ATTN_HD void softmax_slots(float p[kSmallSeqSlots], const float s[kSmallSeqSlots]) {
  float m = -INFINITY;
  for (int j = 0; j < kSmallSeqSlots; ++j) m = s[j] > m ? s[j] : m;
  if (m == -INFINITY) {
    for (int j = 0; j < kSmallSeqSlots; ++j) p[j] = 0.0f;
    return;
  }
  float l = 0.0f;
  for (int j = 0; j < kSmallSeqSlots; ++j) {
    p[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - m);
    l += p[j];
  }
  for (int j = 0; j < kSmallSeqSlots; ++j) p[j] = p[j] / l;  // l >= 1: the max slot gives exp(0)
}

// acc[i] += w * x[i] over one lane's n column slots (w already rounded by the caller).
ATTN_HD void add_times(float* acc, float w, const float* x, int n) {
  for (int i = 0; i < n; ++i) acc[i] += w * x[i];
}

// delta = sum_j p_j dp_j (= dO . O with the unrounded O; no O read in the backward).
ATTN_HD float softmax_delta(const float p[kSmallSeqSlots], const float dp[kSmallSeqSlots]) {
  float acc = 0.0f;
  for (int j = 0; j < kSmallSeqSlots; ++j) acc += p[j] * dp[j];
  return acc;
}

// ds_j = p_j (dp_j - delta) * scale: the gradient of the unscaled q . k_j.
// Slots with p_j = 0 (masked, past the keys) give exactly 0 whatever dp_j holds.
ATTN_HD void softmax_grad_slots(float ds[kSmallSeqSlots], const float p[kSmallSeqSlots],
                                const float dp[kSmallSeqSlots], float delta, float scale) {
  for (int j = 0; j < kSmallSeqSlots; ++j) ds[j] = p[j] == 0.0f ? 0.0f : p[j] * (dp[j] - delta) * scale;
}

}  // namespace attn_oracle::gpu
