// flash_tile.hpp: the tile schedule and element arithmetic of the tensor-core
// (CuTe) attention kernels of the `cuda` backend, shared with the CPU twin
// (attention_twin.cpp) so that both visit the same tiles in the same order and
// round at the same steps. Plain C++17: nvcc and g++ compile it as is.
//
// Forward, per (document, query head, q tile of kBlockM rows): over the kv tiles
// of kv_tile_range in increasing order, S = Q K^T in fp32; each score becomes
// s * scale * log2(e) (a masked one -inf); the row max m and the sum l of
// p = 2^(s - m) run over the tiles (online softmax, base 2); P is rounded to the
// storage type before O += P V; finally O / l and lse = (m + log2 l) * ln 2.
// Tiles wholly inside every row's key interval (tile_fully_allowed) skip the
// per-element mask: the result is the same, only cheaper.
//
// Backward, FlashAttention-2's split, deterministic (no atomics: every output
// element is summed by one thread block in a fixed order):
//  - delta = rowsum(dO * O) per (token, query head), fp32, from the stored O, in
//    flash_delta's order;
//  - dK, dV per (document, kv head, key block of flash_dkdv_tile's block_n keys):
//    over the group's query heads in order and, for each, the q blocks of
//    q_tile_range (block_m rows) in increasing order: S = Q K^T in fp32,
//    p = 2^(s * scale log2 e - lse log2 e) (backward_weight; 0 where masked),
//    dP = dO V^T, ds = p (dP - delta) (score_grad); p and ds rounded to the
//    storage type; dV += p^T dO, dK += ds^T Q; finally dK * scale;
//  - dQ per (document, query head, q block of flash_dq_tile's block_m rows): over
//    the key blocks of kv_tile_range (block_n keys) in increasing order, the same
//    p and ds; dQ += ds K; finally dQ * scale.
// The dK/dV kernel holds S^T (keys as rows) so that p^T and ds^T are the A operands
// of the next products straight from registers; d_split > 1 splits dK and dV by
// columns over that many blocks, each recomputing S and dP (at head_dim 256 the two
// accumulators of 16 keys x 256 would not fit a thread's registers).
#pragma once

#include <cmath>
#include <cstdint>

#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

// Block shapes by head dim: kBlockM query rows by kBlockN keys, kWarps warps of
// 16 rows each. A thread holds kBlockM * D / (32 kWarps) fp32 values of O and
// kBlockM * kBlockN / (32 kWarps) of S: with 16 rows a warp, 64 + 32 at D = 128 and
// 128 + 32 at D = 256, which leaves room for the operand fragments under 255
// registers (32 rows a warp spilled at D = 64 and 128: bench/results/*-build-evidence.md).
struct FlashTile {
  int block_m, block_n, warps;
};

// The two kernel families: SM80's MMA (any device from sm_80 on) and Hopper's
// warpgroup MMA fed by TMA (flash_{fwd,bwd}_sm90.cu, sm_90a only). Only their
// forward tiles differ in the arithmetic (the twin takes the one it is asked for):
// the backward's sums are the same whatever its blocks, a masked pair adding
// exactly 0, and the Hopper backward's blocks are the ones below.
enum class FlashArch : int { sm80 = 80, sm90 = 90 };

// Hopper: 128 query rows (two consumer warpgroups of 64, 8 warps), keys by 128
// (64 at D = 256: O's 128 fp32 values a thread leave room for S's 32 only).
ATTN_HD constexpr FlashTile flash_forward_tile(int head_dim, FlashArch arch = FlashArch::sm80) {
  if (arch == FlashArch::sm90) return head_dim <= 128 ? FlashTile{128, 128, 8} : FlashTile{128, 64, 8};
  return head_dim <= 128 ? FlashTile{128, 64, 8} : FlashTile{64, 64, 4};
}

// dK/dV kernel: block_n keys a block (16 a warp), q blocks of block_m rows, dK and
// dV columns split over d_split blocks. A thread holds 16 * (D / d_split) / 32 fp32
// values each of dK and dV and 16 * block_m / 32 each of S and dP: 64 + 64 at
// D = 64, 128 + 32 at D = 128 and at D = 256 (split 2), at 236-255 registers already;
// 128 + 64 at D = 128 (a first trial) spilled, as two accumulators of 16 x 256 would.
struct FlashDkdvTile {
  int block_n, block_m, warps, d_split;
};

ATTN_HD constexpr FlashDkdvTile flash_dkdv_tile(int head_dim) {
  return head_dim <= 64 ? FlashDkdvTile{128, 64, 8, 1}
                        : head_dim <= 128 ? FlashDkdvTile{128, 32, 8, 1} : FlashDkdvTile{128, 32, 8, 2};
}

// dQ kernel: block_m query rows (16 a warp) by key blocks of block_n; a thread holds
// 16 * D / 32 values of dQ and 16 * block_n / 32 each of S and dP (160 at D = 256).
ATTN_HD constexpr FlashTile flash_dq_tile(int head_dim) {
  return head_dim <= 128 ? FlashTile{128, 64, 8} : FlashTile{128, 32, 8};
}

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// A raw score q . k in the base-2 softmax domain.
ATTN_HD float score_log2(float raw, float scale_log2) { return raw * scale_log2; }

// 2^x for x <= 0: the device's ex2.approx (2 ulp, results under 2^-126 flushed to
// 0, as the tensor-core kernels everywhere take it), exp2f on the host. The twin
// and the kernels differ here by rounding only, inside the tolerance rule.
ATTN_HD float exp2_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// p = 2^(s - m); 0 for a masked score, and while no score of the row is allowed.
ATTN_HD float softmax_weight(float s, float m) { return m == -INFINITY ? 0.0f : exp2_nonpositive(s - m); }

// The factor a row's l and O take when its max moves from m_old to m_new.
ATTN_HD float rescale_factor(float m_old, float m_new) {
  return m_old == -INFINITY ? (m_new == -INFINITY ? 1.0f : 0.0f) : exp2_nonpositive(m_old - m_new);
}

// Natural-log lse of a row from its base-2 max and sum; -inf when nothing is attended.
ATTN_HD float lse_from_log2(float m, float l) { return l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY; }

// lse in the base-2 domain of backward_weight; a row that attended nothing (-inf)
// gets +inf, so that any weight computed for it is 0, never inf - inf.
ATTN_HD float lse_log2_of(float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; }

// The softmax probability of a raw score q . k, recomputed from the row's lse.
ATTN_HD float backward_weight(float raw, float scale_log2, float lse_log2) {
  return exp2_nonpositive(raw * scale_log2 - lse_log2);
}

// dL/ds of a score (before the softmax scale, applied to dK and dQ at the end).
ATTN_HD float score_grad(float p, float dp, float delta) { return p * (dp - delta); }

// delta = sum_c dO[c] O[c] in the preprocessing kernel's order: lane l of 8 sums the
// 8-element chunks l, l + 8, l + 16, ... element by element, then the lanes meet as a
// butterfly (xor 4, then 2, then 1), whose lane 0 holds the result below.
inline constexpr int kDeltaLanes = 8, kDeltaChunk = 8;

ATTN_HD float flash_delta(const float* d_o, const float* o, int head_dim) {
  float lane[kDeltaLanes];
  for (int l = 0; l < kDeltaLanes; ++l) {
    lane[l] = 0.0f;
    for (int c = l * kDeltaChunk; c < head_dim; c += kDeltaLanes * kDeltaChunk)
      for (int e = c; e < c + kDeltaChunk && e < head_dim; ++e) lane[l] += d_o[e] * o[e];
  }
  const float x0 = lane[0] + lane[4], x1 = lane[1] + lane[5], x2 = lane[2] + lane[6], x3 = lane[3] + lane[7];
  return (x0 + x2) + (x1 + x3);
}

// True when every query of [a0, a1) may attend every key of [b0, b1), all of them
// inside the document: the per-element mask would change nothing. The interval
// ends never decrease with the query, so the first query's hi and the last's lo decide.
ATTN_HD bool tile_fully_allowed(int mask, int64_t left, int64_t right, int64_t a0, int64_t a1, int64_t b0, int64_t b1,
                                int64_t lq, int64_t lkv) {
  if (a1 > lq || b1 > lkv || a0 >= a1 || b0 >= b1) return false;
  const KeyInterval first = key_interval(mask, left, right, a0, lq, lkv);
  const KeyInterval last = key_interval(mask, left, right, a1 - 1, lq, lkv);
  return last.lo <= b0 && first.hi >= b1 - 1;
}

}  // namespace attn_oracle::gpu
