// small_seq_twin.cpp: the CPU twin of the small-sequence kernels
// (docs/semantics.md#8-small-sequence-problems). The kernels' per-lane steps
// (small_seq/small_seq_rows.hpp) run in loops: over (document, kv head) items as the kernels'
// warps, over the group's query heads, and over the kLanes lanes of a warp, each lane holding its
// column slots of a head_dim row. The lane sums go through the same xor butterfly as the
// device's shuffles (warp_sum below), so the twin adds in the kernel's order.
//  - forward per query head: dots of q with the document's keys (fp32),
//    masked_scores, softmax_slots -> P (fp32, stored), o = sum_j round(P_j) v_j
//    (fp32 accumulation), o rounded to the dtype;
//  - backward from the stored P: dP_j = dO . v_j, delta = sum_j P_j dP_j,
//    dS = P (dP - delta) * scale, dq = sum_j round(dS_j) k_j per query head; then
//    per key dk_j = sum_h round(dS_hj) q_h, dv_j = sum_h round(P_hj) dO_h over the
//    group's query heads in order (one owner per kv token: no atomics, deterministic).
// Validation and the document list come from plan_small_seq (small_seq_plan.cpp):
// production code, never the reference. Tokens of no document get o = dq = 0, kv
// tokens of no document dk = dv = 0.
//
// Tested by tests/small_seq_twin_test.cpp against the float64 references within
// the tolerance rule, on error codes and on determinism.
#include <algorithm>
#include <vector>

#include "attn_oracle/gpu/attention/numeric.hpp"
#include "attn_oracle/gpu/small_seq.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_plan.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_rows.hpp"

namespace attn_oracle::gpu {

static_assert(static_cast<int>(Dtype::fp32) == kFp32 && static_cast<int>(Dtype::bf16) == kBf16);
static_assert(kSmallSeqSlots == kSmallSeqMaxKeys);

namespace {

// The host side of the warp-sum policy: the device's xor butterfly (lane a adds
// lane a ^ m for m = 16, 8, ..., 1) computed for lane 0 only, which at step m needs
// lanes a < m, whose partner a ^ m is a + m. Same additions, same order.
float warp_sum(const float (&partial)[kLanes]) {
  float x[kLanes];
  std::copy(partial, partial + kLanes, x);
  for (int m = kLanes / 2; m >= 1; m /= 2)
    for (int a = 0; a < m; ++a) x[a] = x[a] + x[a + m];
  return x[0];
}

// The twin's memory holds every head_dim row lane-major: lane l's column slots
// lane_column(l, 0), lane_column(l, 1), ... contiguous, then lane l + 1's (columns
// past d as 0), the order a warp's registers hold them. So a lane's share of a row
// is a pointer, not a gather; the rows are permuted back when copied out.
int padded_dim(int d) { return kLanes * lane_slots(d); }

// Where column c sits in a lane-major row: lane (c / 2) % 32, slot (c / 64) * 2 + c % 2
// (the inverse of lane_column).
int lane_major_index(int c, int slots) { return ((c >> 1) % kLanes) * slots + (c / (2 * kLanes)) * 2 + (c & 1); }

std::vector<float> to_lane_major(const std::vector<double>& t, int d, int dtype) {
  const int slots = lane_slots(d), padded = padded_dim(d);
  std::vector<int> at(d);
  for (int c = 0; c < d; ++c) at[c] = lane_major_index(c, slots);
  const size_t rows = t.size() / size_t(d);
  std::vector<float> out(rows * padded, 0.0f);
  for (size_t r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c) out[r * padded + at[c]] = round_to(static_cast<float>(t[r * d + c]), dtype);
  return out;
}

void from_lane_major(const std::vector<float>& t, int d, std::vector<double>& out) {
  const int slots = lane_slots(d), padded = padded_dim(d);
  const size_t rows = t.size() / size_t(padded);
  out.assign(rows * d, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c) out[r * d + c] = t[r * padded + lane_major_index(c, slots)];
}

// One head_dim row as the warp holds it: lane(l) points at lane l's slots.
struct LaneRow {
  const float* base;
  int slots;
  const float* lane(int l) const { return base + size_t(l) * slots; }
};

// A warp's fp32 accumulator row.
struct LaneAcc {
  int slots;
  std::vector<float> data;
  explicit LaneAcc(int d) : slots(lane_slots(d)), data(size_t(padded_dim(d)), 0.0f) {}
  float* lane(int l) { return &data[size_t(l) * slots]; }
  void zero() { std::fill(data.begin(), data.end(), 0.0f); }
};

// The rounded accumulator into a lane-major row (padding slots stay 0).
void store_lanes(float* row, const LaneAcc& acc, int dtype) {
  for (size_t i = 0; i < acc.data.size(); ++i) row[i] = round_to(acc.data[i], dtype);
}

// a . b over the warp: each lane's partial_dot, then the butterfly.
float warp_dot(const LaneRow& a, const LaneRow& b) {
  float partial[kLanes];
  for (int l = 0; l < kLanes; ++l) partial[l] = partial_dot(a.lane(l), b.lane(l), a.slots);
  return warp_sum(partial);
}

void add_times_lanes(LaneAcc& acc, float w, const LaneRow& x) {
  for (int l = 0; l < kLanes; ++l) add_times(acc.lane(l), w, x.lane(l), acc.slots);
}

// The twin's device memory, lane-major: inputs as dtype values in float, outputs
// as the kernels write them (P as is: [docs, Hq, 16]).
struct TwinBuffers {
  std::vector<float> q, k, v, d_o, o, p, dq, dk, dv;
};

// Row `head` of token `token` in a lane-major [tokens, heads, padded] tensor.
LaneRow row_of(const void* t, int64_t token, int heads, int head, int d) {
  return LaneRow{static_cast<const float*>(t) + (token * heads + head) * padded_dim(d), lane_slots(d)};
}
float* out_row(void* t, int64_t token, int heads, int head, int d) {
  return static_cast<float*>(t) + (token * heads + head) * padded_dim(d);
}

struct Warp {
  LaneAcc acc, acc2;
  explicit Warp(int d) : acc(d), acc2(d) {}
};

// One (document, kv head): the forward kernel's warp.
void forward_item(const SmallSeqParams& p, int64_t doc, int hk, Warp& w) {
  const int D = p.head_dim, group = p.heads_q / p.heads_kv, keys = p.keys[doc];
  const unsigned allowed = allowed_keys(p, doc);
  const int64_t qt = p.q_token[doc], k0 = p.first_key[doc];
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const LaneRow q = row_of(p.q, qt, p.heads_q, h, D);
    float dot[kSmallSeqSlots] = {};
    for (int j = 0; j < keys; ++j) dot[j] = warp_dot(q, row_of(p.k, k0 + j, p.heads_kv, hk, D));
    float s[kSmallSeqSlots], pr[kSmallSeqSlots];
    masked_scores(s, dot, allowed, p.scale);
    softmax_slots(pr, s);
    std::copy(pr, pr + kSmallSeqSlots, p.p + (doc * p.heads_q + h) * kSmallSeqSlots);
    w.acc.zero();
    for (int j = 0; j < keys; ++j) add_times_lanes(w.acc, round_to(pr[j], p.dtype), row_of(p.v, k0 + j, p.heads_kv, hk, D));
    store_lanes(out_row(p.o, qt, p.heads_q, h, D), w.acc, p.dtype);
  }
}

// One (document, kv head): the backward kernel's warp. ds / pr: [group][16] scratch
// (the kernel's shared memory).
void backward_item(const SmallSeqParams& p, int64_t doc, int hk, Warp& w, std::vector<float>& ds_all,
                   std::vector<float>& p_all) {
  const int D = p.head_dim, group = p.heads_q / p.heads_kv, keys = p.keys[doc];
  const int64_t qt = p.q_token[doc], k0 = p.first_key[doc];
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    float* pr = &p_all[size_t(g) * kSmallSeqSlots];
    float* ds = &ds_all[size_t(g) * kSmallSeqSlots];
    std::copy_n(p.p + (doc * p.heads_q + h) * kSmallSeqSlots, kSmallSeqSlots, pr);
    const LaneRow d_o = row_of(p.d_o, qt, p.heads_q, h, D);
    float dp[kSmallSeqSlots] = {};
    for (int j = 0; j < keys; ++j) dp[j] = warp_dot(d_o, row_of(p.v, k0 + j, p.heads_kv, hk, D));
    softmax_grad_slots(ds, pr, dp, softmax_delta(pr, dp), p.scale);
    w.acc.zero();
    for (int j = 0; j < keys; ++j) add_times_lanes(w.acc, round_to(ds[j], p.dtype), row_of(p.k, k0 + j, p.heads_kv, hk, D));
    store_lanes(out_row(p.dq, qt, p.heads_q, h, D), w.acc, p.dtype);
  }
  for (int j = 0; j < keys; ++j) {
    w.acc.zero(), w.acc2.zero();
    for (int g = 0; g < group; ++g) {
      const int h = hk * group + g;
      add_times_lanes(w.acc, round_to(ds_all[size_t(g) * kSmallSeqSlots + j], p.dtype), row_of(p.q, qt, p.heads_q, h, D));
      add_times_lanes(w.acc2, round_to(p_all[size_t(g) * kSmallSeqSlots + j], p.dtype),
                      row_of(p.d_o, qt, p.heads_q, h, D));
    }
    store_lanes(out_row(p.dk, k0 + j, p.heads_kv, hk, D), w.acc, p.dtype);
    store_lanes(out_row(p.dv, k0 + j, p.heads_kv, hk, D), w.acc2, p.dtype);
  }
}

}  // namespace

Expected<SmallSeqResult> small_seq_twin(const AttentionProblem& problem, const AttentionInputs& inputs) {
  auto planned = plan_small_seq(problem, inputs);
  if (!planned) return planned.error();
  const SmallSeqPlan& plan = planned.value();
  const bool backward = problem.shape.backward;
  const int dtype = static_cast<int>(problem.shape.dtype);

  const int d = static_cast<int>(plan.d);
  const size_t q_rows = size_t(plan.rows * plan.tq * plan.hq), kv_rows = size_t(plan.rows * plan.tkv * plan.hkv);
  const size_t q_elems = q_rows * padded_dim(d), kv_elems = kv_rows * padded_dim(d);
  TwinBuffers b{to_lane_major(inputs.q, d, dtype), to_lane_major(inputs.k, d, dtype),
                to_lane_major(inputs.v, d, dtype), to_lane_major(inputs.d_o, d, dtype),
                std::vector<float>(q_elems, 0.0f), std::vector<float>(plan.p_elems(), 0.0f), {}, {}, {}};
  if (backward) b.dq.assign(q_elems, 0.0f), b.dk.assign(kv_elems, 0.0f), b.dv.assign(kv_elems, 0.0f);
  SmallSeqParams p = small_seq_shape_params(problem, plan);
  p.q = b.q.data(), p.k = b.k.data(), p.v = b.v.data(), p.o = b.o.data(), p.p = b.p.data();
  p.d_o = b.d_o.data(), p.dq = b.dq.data(), p.dk = b.dk.data(), p.dv = b.dv.data();
  p.q_token = plan.q_token.data(), p.first_key = plan.first_key.data(), p.keys = plan.keys.data();
  p.q_pos = plan.q_pos.data(), p.kv_pos = plan.kv_pos.data();

  Warp w(p.head_dim);
  for (int64_t doc = 0; doc < p.docs; ++doc)
    for (int hk = 0; hk < p.heads_kv; ++hk) forward_item(p, doc, hk, w);
  if (backward) {
    std::vector<float> ds_all(size_t(p.heads_q / p.heads_kv) * kSmallSeqSlots), p_all(ds_all.size());
    for (int64_t doc = 0; doc < p.docs; ++doc)
      for (int hk = 0; hk < p.heads_kv; ++hk) backward_item(p, doc, hk, w, ds_all, p_all);
  }

  SmallSeqResult r;
  from_lane_major(b.o, d, r.o);  // already dtype values
  r.p.assign(b.p.begin(), b.p.end());  // fp32, as the device stores P
  if (backward) {
    r.grads.emplace();
    from_lane_major(b.dq, d, r.grads->dq), from_lane_major(b.dk, d, r.grads->dk), from_lane_major(b.dv, d, r.grads->dv);
  }
  return r;
}

}  // namespace attn_oracle::gpu
