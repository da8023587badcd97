// attention_kernels.cu: fused varlen (THD) attention forward and backward on the
// GPU, fp16 / bf16 storage with fp32 accumulation, head dims 64 / 128 / 256.
//
// One warp per block; each block owns one tile of work and holds its tiles in
// shared memory. The tensor cores (WMMA 16x16x16) do every product; the row logic
// is the CPU twin's own code (attention/*.hpp), run by lanes 0..15, one row each:
//   forward  (doc, q head, q tile):   S = Q K^T, scale + index_allowed mask,
//            online_softmax_update_inplace, rescale_row, P rounded, O += P V,
//            finalize_row, row_lse; kv tiles from kv_tile_range.
//   delta    (doc, q head, q tile):   row_delta(dO, O).
//   dK, dV   (doc, kv head, kv tile): over the group's query heads and the q tiles
//            of q_tile_range: P = probabilities_from_lse_inplace, dV += P^T dO,
//            dP = dO V^T, dS = softmax_grad_row_inplace * scale, dK += dS^T Q.
//   dQ       (doc, q head, q tile):   over kv_tile_range: dQ += dS K.
// O += P V loads the fp32 O tile (rows already rescaled by rescale_row in shared
// memory) as the WMMA accumulator: accumulator elements cannot be scaled by row
// directly (see mma_accumulate), and this form needs no temporary tile to fold.
// The backward is deterministic with no atomics: each dK/dV tile and each dQ tile
// is owned by exactly one warp that sums its contributions in a fixed order, so
// results are bitwise reproducible (atomicAdd order varies run to run, and a
// replayed counterexample must give the same numbers).
//
// Grid: x = the flattened (document, tile) index, y = head. Per-document tile
// prefixes come from the host (which has cu_seqlens anyway) and a block finds its
// document by binary search: launching max-tiles-per-document blocks instead would
// idle most of the grid when lengths vary (a 512-token document beside an 8k one
// would use 32 of its 512 blocks).
//
// Blocks are one warp (lanes 16..31 idle in the row steps): shared memory per block
// is 13 / 23 / 43 KiB forward at D = 64 / 128 / 256, up to 70 KiB for dK/dV at
// D = 256 (dK/dV and dQ opt in past 48 KiB); 46-96 registers, no spills (ptxas -v, sm_90).
//
// Outputs of tokens outside every document (o = 0, lse = -inf, dq = dk = dv = 0)
// are filled before the kernels, so nothing is left stale. The dispatch from
// runtime (dtype, head dim) to templates is `dispatch` below, the only place.
// `cuda-next` runs the CuTe kernels of flash/ instead (flash_launch.hpp), forward
// and backward, on their own blocks; the WMMA kernels here stay the `cuda` backend's.
// Checked by the conformance properties on the `cuda` backend; without a device,
// only compiled (CI).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/attention/online_softmax.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "attn_oracle/gpu/attention_device.hpp"
#include "device_array.cuh"
#include "event_timer.cuh"
#include "flash/flash_launch.hpp"

namespace attn_oracle::gpu {
namespace {

using namespace nvcuda;

constexpr int kWarpSize = 32;
static_assert(kTileQ == 16 && kTileKv == 16, "the kernels use one 16x16x16 WMMA tile per step");

// ------------------------------------------------------------------ storage policy
// What the twin cannot share: conversions to and from the 16-bit storage types
// (round to nearest even, as numeric.hpp's round_fp16 / round_bf16 on the host).
template <class T>
struct Storage;
template <>
struct Storage<__half> {
  __device__ static float to_float(__half x) { return __half2float(x); }
  __device__ static __half round(float x) { return __float2half_rn(x); }
};
template <>
struct Storage<__nv_bfloat16> {
  __device__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 round(float x) { return __float2bfloat16_rn(x); }
};

// ------------------------------------------------------------------ shared memory
// Row strides, padded by 16 bytes so that the lane-per-row loops spread over the
// banks (16 unpadded fp32 rows of D floats would all start in bank 0); WMMA needs
// ldm to be a multiple of 16 bytes, and 32-byte aligned tile starts.
template <int D>
constexpr int kLdH = D + 8;  // 16-bit tiles, 16 x D
template <int D>
constexpr int kLdF = D + 4;  // fp32 tiles, 16 x D
constexpr int kLdS = kTileKv + 4;  // fp32 16 x 16 scores
constexpr int kLdP = kTileKv + 8;  // 16-bit 16 x 16 probabilities

template <class T, int D>
constexpr size_t kHalfTile = size_t(kTileQ) * kLdH<D> * sizeof(T);
template <int D>
constexpr size_t kFloatTile = size_t(kTileQ) * kLdF<D> * sizeof(float);
constexpr size_t kScoreTile = size_t(kTileQ) * kLdS * sizeof(float);
template <class T>
constexpr size_t kProbTile = size_t(kTileQ) * kLdP * sizeof(T);

// Forward: Q, K, V (16-bit), O (fp32), S (fp32), P (16-bit).
// Bytes: D=64 13312, D=128 23552, D=256 44032.
template <class T, int D>
struct FwdSmem {
  static constexpr size_t kQ = 0, kK = kQ + kHalfTile<T, D>, kV = kK + kHalfTile<T, D>, kO = kV + kHalfTile<T, D>,
                          kS = kO + kFloatTile<D>, kP = kS + kScoreTile, kBytes = kP + kProbTile<T>;
  T *q, *k, *v, *p;
  float *o, *s;
  __device__ explicit FwdSmem(unsigned char* base)
      : q(reinterpret_cast<T*>(base + kQ)), k(reinterpret_cast<T*>(base + kK)), v(reinterpret_cast<T*>(base + kV)),
        p(reinterpret_cast<T*>(base + kP)), o(reinterpret_cast<float*>(base + kO)),
        s(reinterpret_cast<float*>(base + kS)) {}
};

// Delta: O and dO widened to fp32. Bytes: D=64 8704, D=128 16896, D=256 33280.
template <int D>
struct DeltaSmem {
  static constexpr size_t kO = 0, kDo = kFloatTile<D>, kBytes = 2 * kFloatTile<D>;
  float *o, *d_o;
  __device__ explicit DeltaSmem(unsigned char* base)
      : o(reinterpret_cast<float*>(base + kO)), d_o(reinterpret_cast<float*>(base + kDo)) {}
};

// dK/dV: K, V, Q, dO (16-bit), dK, dV (fp32), S, dP (fp32), P, dS (16-bit).
// Bytes: D=64 22016, D=128 38400, D=256 71168.
template <class T, int D>
struct DkvSmem {
  static constexpr size_t kK = 0, kV = kK + kHalfTile<T, D>, kQ = kV + kHalfTile<T, D>, kDo = kQ + kHalfTile<T, D>,
                          kDk = kDo + kHalfTile<T, D>, kDv = kDk + kFloatTile<D>, kS = kDv + kFloatTile<D>,
                          kDp = kS + kScoreTile, kP = kDp + kScoreTile, kDs = kP + kProbTile<T>,
                          kBytes = kDs + kProbTile<T>;
  T *k, *v, *q, *d_o, *p, *ds;
  float *dk, *dv, *s, *dp;
  __device__ explicit DkvSmem(unsigned char* base)
      : k(reinterpret_cast<T*>(base + kK)), v(reinterpret_cast<T*>(base + kV)), q(reinterpret_cast<T*>(base + kQ)),
        d_o(reinterpret_cast<T*>(base + kDo)), p(reinterpret_cast<T*>(base + kP)),
        ds(reinterpret_cast<T*>(base + kDs)), dk(reinterpret_cast<float*>(base + kDk)),
        dv(reinterpret_cast<float*>(base + kDv)), s(reinterpret_cast<float*>(base + kS)),
        dp(reinterpret_cast<float*>(base + kDp)) {}
};

// dQ: Q, dO, K, V (16-bit), dQ (fp32), S, dP (fp32), dS (16-bit).
// Bytes: D=64 16896, D=128 29184, D=256 53760.
template <class T, int D>
struct DqSmem {
  static constexpr size_t kQ = 0, kDo = kQ + kHalfTile<T, D>, kK = kDo + kHalfTile<T, D>, kV = kK + kHalfTile<T, D>,
                          kDq = kV + kHalfTile<T, D>, kS = kDq + kFloatTile<D>, kDp = kS + kScoreTile,
                          kDs = kDp + kScoreTile, kBytes = kDs + kProbTile<T>;
  T *q, *d_o, *k, *v, *ds;
  float *dq, *s, *dp;
  __device__ explicit DqSmem(unsigned char* base)
      : q(reinterpret_cast<T*>(base + kQ)), d_o(reinterpret_cast<T*>(base + kDo)), k(reinterpret_cast<T*>(base + kK)),
        v(reinterpret_cast<T*>(base + kV)), ds(reinterpret_cast<T*>(base + kDs)),
        dq(reinterpret_cast<float*>(base + kDq)), s(reinterpret_cast<float*>(base + kS)),
        dp(reinterpret_cast<float*>(base + kDp)) {}
};

static_assert(kScoreTile % 32 == 0 && kProbTile<__half> % 32 == 0 && kHalfTile<__half, 64> % 32 == 0 &&
                  kFloatTile<64> % 32 == 0,
              "WMMA tile pointers must stay 32-byte aligned");

// ------------------------------------------------------------------ tile movement
// Rows [0, rows) of the 16 x D tile of `head` from token `token0` of a
// [tokens, heads, D] tensor, 16-byte vectors across the warp; rows past `rows` are
// zeroed so that masked entries (p = 0, ds = 0) never meet stale or NaN data.
template <class T, int D>
__device__ void load_tile(T* dst, const T* src, int64_t token0, int rows, int heads, int head, int lane) {
  constexpr int kPerVec = 16 / int(sizeof(T)), kVecs = D / kPerVec;
  for (int i = lane; i < kTileQ * kVecs; i += kWarpSize) {
    const int r = i / kVecs, c = (i % kVecs) * kPerVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = __ldg(reinterpret_cast<const uint4*>(src + ((token0 + r) * heads + head) * D + c));
    *reinterpret_cast<uint4*>(dst + r * kLdH<D> + c) = v;
  }
}

template <class T, int D>
__device__ void load_tile_widened(float* dst, const T* src, int64_t token0, int rows, int heads, int head, int lane) {
  for (int i = lane; i < kTileQ * D; i += kWarpSize) {
    const int r = i / D, c = i % D;
    dst[r * kLdF<D> + c] = r < rows ? Storage<T>::to_float(src[((token0 + r) * heads + head) * D + c]) : 0.0f;
  }
}

// Rows [0, rows) of an fp32 tile, rounded to T, into the [tokens, heads, D] tensor.
template <class T, int D>
__device__ void store_tile_rounded(T* dst, const float* src, int64_t token0, int rows, int heads, int head, int lane) {
  constexpr int kPerVec = 16 / int(sizeof(T)), kVecs = D / kPerVec;
  for (int i = lane; i < rows * kVecs; i += kWarpSize) {
    const int r = i / kVecs, c = (i % kVecs) * kPerVec;
    uint4 packed;
    T* out = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int e = 0; e < kPerVec; ++e) out[e] = Storage<T>::round(src[r * kLdF<D> + c + e]);
    *reinterpret_cast<uint4*>(dst + ((token0 + r) * heads + head) * D + c) = packed;
  }
}

template <int D>
__device__ void zero_tile(float* dst, int lane) {
  for (int i = lane; i < kTileQ * kLdF<D>; i += kWarpSize) dst[i] = 0.0f;
}

// ------------------------------------------------------------------ tensor-core products
// s (16 x 16, fp32) = a (16 x D) . b (16 x D)^T, both row-major in shared memory:
// b read as the column-major B operand is b^T.
template <class T, int D>
__device__ void mma_abt(float* s, const T* a, const T* b) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + k0, kLdH<D>);
    wmma::load_matrix_sync(fb, b + k0, kLdH<D>);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(s, acc, kLdS, wmma::mem_row_major);
}

// c (16 x D, fp32 in shared memory) += a (16 x 16) . b (16 x D). ALayout row_major
// reads a as stored; col_major reads the stored 16 x 16 tile transposed (P^T, dS^T).
// The fp32 tile is loaded as the accumulator's C and stored back: WMMA accumulator
// elements are spread over lanes in an unspecified order, so nothing can be done
// to a row of them in registers; every per-row operation happens in shared memory.
template <class T, int D, class ALayout>
__device__ void mma_accumulate(float* c, const T* a, const T* b) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, ALayout> fa;
  wmma::load_matrix_sync(fa, a, kLdP);
#pragma unroll 4
  for (int n0 = 0; n0 < D; n0 += 16) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c + n0, kLdF<D>, wmma::mem_row_major);
    wmma::load_matrix_sync(fb, b + n0, kLdH<D>);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(c + n0, acc, kLdF<D>, wmma::mem_row_major);
  }
}

// ------------------------------------------------------------------ rows (one lane each)
// Scales raw scores of query a (index in the document) against keys b0 .. b0+15
// and sets every entry the document's index rule forbids, or past either end of
// the document, to -inf.
__device__ void scale_and_mask_row(float* s, const AttentionFwdParams& p, const DocSpan& span, int64_t a, int64_t b0) {
#pragma unroll
  for (int j = 0; j < kTileKv; ++j) {
    const int64_t b = b0 + j;
    const bool allowed = a < span.lq && b < span.lkv &&
                         index_allowed(p.mask, p.window_left, p.window_right, a, b, span.lq, span.lkv);
    s[j] = allowed ? s[j] * p.scale : -INFINITY;
  }
}

// Backward row: s (raw scores) becomes P, dp becomes dS * scale; P and dS are
// also stored rounded to T for the tensor cores (p_out may be null: dQ needs no P).
template <class T>
__device__ void backward_row(const AttentionFwdParams& p, const DocSpan& span, int64_t a, int64_t b0, float lse,
                             float delta, float* s, float* dp, T* p_out, T* ds_out) {
  scale_and_mask_row(s, p, span, a, b0);
  probabilities_from_lse_inplace(s, kTileKv, lse);
  softmax_grad_row_inplace(dp, s, kTileKv, delta);
  rescale_row(dp, kTileKv, p.scale);  // the scores were scaled: dL/d(qk) = scale * dS
#pragma unroll
  for (int j = 0; j < kTileKv; ++j) {
    if (p_out) p_out[j] = Storage<T>::round(s[j]);
    ds_out[j] = Storage<T>::round(dp[j]);
  }
}

// ------------------------------------------------------------------ forward
template <class T, int D>
__device__ void forward_tile(const AttentionFwdParams& p, const DocSpan& span, int h, int64_t tile,
                             const FwdSmem<T, D>& sm, int lane) {
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int g = kv_head_of(h, p.heads_q, p.heads_kv);
  const int64_t a0 = tile * kTileQ;
  const int rows = static_cast<int>(span.lq - a0 < kTileQ ? span.lq - a0 : kTileQ);
  load_tile<T, D>(sm.q, q, span.q0 + a0, rows, p.heads_q, h, lane);
  zero_tile<D>(sm.o, lane);
  __syncwarp();  // lanes read rows other lanes zeroed, even when no kv tile is visited
  SoftmaxRow row;  // lane r < 16 keeps row r's state in registers for the whole loop

  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, span.lq, span.lkv, kTileKv);
  for (int64_t j = kv.begin; j < kv.end; ++j) {
    const int64_t b0 = j * kTileKv;
    const int cols = static_cast<int>(span.lkv - b0 < kTileKv ? span.lkv - b0 : kTileKv);
    load_tile<T, D>(sm.k, k, span.kv0 + b0, cols, p.heads_kv, g, lane);
    load_tile<T, D>(sm.v, v, span.kv0 + b0, cols, p.heads_kv, g, lane);
    __syncwarp();
    mma_abt<T, D>(sm.s, sm.q, sm.k);  // S = Q K^T
    __syncwarp();
    if (lane < kTileQ) {
      float* s = sm.s + lane * kLdS;
      scale_and_mask_row(s, p, span, a0 + lane, b0);
      const float alpha = online_softmax_update_inplace(row, s, kTileKv);
      rescale_row(sm.o + lane * kLdF<D>, D, alpha);
#pragma unroll
      for (int c = 0; c < kTileKv; ++c) sm.p[lane * kLdP + c] = Storage<T>::round(s[c]);
    }
    __syncwarp();
    mma_accumulate<T, D, wmma::row_major>(sm.o, sm.p, sm.v);  // O += P V
    __syncwarp();
  }
  if (lane < rows) {
    finalize_row(sm.o + lane * kLdF<D>, D, row);
    p.lse[h * p.total_q + span.q0 + a0 + lane] = row_lse(row);
  }
  __syncwarp();
  store_tile_rounded<T, D>(static_cast<T*>(p.o), sm.o, span.q0 + a0, rows, p.heads_q, h, lane);
}

template <class T, int D>
__global__ void __launch_bounds__(kWarpSize) attention_fwd_kernel(AttentionFwdParams p, const int64_t* q_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TileItem item = locate_tile(q_tiles, p.docs, blockIdx.x);
  forward_tile<T, D>(p, doc_span(p, item.doc), static_cast<int>(blockIdx.y), item.tile, FwdSmem<T, D>(smem),
                     static_cast<int>(threadIdx.x));
}

// ------------------------------------------------------------------ backward
template <class T, int D>
__device__ void delta_tile(const AttentionBwdParams& p, const DocSpan& span, int h, int64_t tile,
                           const DeltaSmem<D>& sm, int lane) {
  const int64_t a0 = tile * kTileQ;
  const int rows = static_cast<int>(span.lq - a0 < kTileQ ? span.lq - a0 : kTileQ);
  load_tile_widened<T, D>(sm.o, static_cast<const T*>(p.o_in), span.q0 + a0, rows, p.heads_q, h, lane);
  load_tile_widened<T, D>(sm.d_o, static_cast<const T*>(p.d_o), span.q0 + a0, rows, p.heads_q, h, lane);
  __syncwarp();
  if (lane < rows)
    p.delta[h * p.total_q + span.q0 + a0 + lane] = row_delta(sm.d_o + lane * kLdF<D>, sm.o + lane * kLdF<D>, D);
}

template <class T, int D>
__global__ void __launch_bounds__(kWarpSize) attention_bwd_delta_kernel(AttentionBwdParams p, const int64_t* q_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TileItem item = locate_tile(q_tiles, p.docs, blockIdx.x);
  delta_tile<T, D>(p, doc_span(p, item.doc), static_cast<int>(blockIdx.y), item.tile, DeltaSmem<D>(smem),
                   static_cast<int>(threadIdx.x));
}

// lse and delta of query a0 + lane of head h; a row past the document gets lse = -inf (P = 0).
__device__ void load_row_stats(const AttentionBwdParams& p, const DocSpan& span, int h, int64_t a0, int rows, int lane,
                               float* lse, float* delta) {
  *lse = -INFINITY, *delta = 0.0f;
  if (lane < rows) {
    const int64_t i = h * p.total_q + span.q0 + a0 + lane;
    *lse = p.lse_in[i], *delta = p.delta[i];
  }
}

template <class T, int D>
__device__ void dkdv_tile(const AttentionBwdParams& p, const DocSpan& span, int g, int64_t tile,
                          const DkvSmem<T, D>& sm, int lane) {
  const T* q = static_cast<const T*>(p.q);
  const T* d_o = static_cast<const T*>(p.d_o);
  const int64_t b0 = tile * kTileKv;
  const int cols = static_cast<int>(span.lkv - b0 < kTileKv ? span.lkv - b0 : kTileKv);
  load_tile<T, D>(sm.k, static_cast<const T*>(p.k), span.kv0 + b0, cols, p.heads_kv, g, lane);
  load_tile<T, D>(sm.v, static_cast<const T*>(p.v), span.kv0 + b0, cols, p.heads_kv, g, lane);
  zero_tile<D>(sm.dk, lane);
  zero_tile<D>(sm.dv, lane);
  __syncwarp();  // the store reads what other lanes zeroed, even when no q tile is visited

  const TileRange q_tiles = q_tile_range(p.mask, p.window_left, p.window_right, b0, b0 + cols, span.lq, span.lkv, kTileQ);
  const int group = p.heads_q / p.heads_kv;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = q_tiles.begin; i < q_tiles.end; ++i) {
      const int64_t a0 = i * kTileQ;
      const int rows = static_cast<int>(span.lq - a0 < kTileQ ? span.lq - a0 : kTileQ);
      load_tile<T, D>(sm.q, q, span.q0 + a0, rows, p.heads_q, h, lane);
      load_tile<T, D>(sm.d_o, d_o, span.q0 + a0, rows, p.heads_q, h, lane);
      float lse, delta;
      load_row_stats(p, span, h, a0, rows, lane, &lse, &delta);
      __syncwarp();
      mma_abt<T, D>(sm.s, sm.q, sm.k);     // S = Q K^T
      mma_abt<T, D>(sm.dp, sm.d_o, sm.v);  // dP = dO V^T
      __syncwarp();
      if (lane < kTileQ)
        backward_row<T>(p, span, a0 + lane, b0, lse, delta, sm.s + lane * kLdS, sm.dp + lane * kLdS,
                        sm.p + lane * kLdP, sm.ds + lane * kLdP);
      __syncwarp();
      mma_accumulate<T, D, wmma::col_major>(sm.dv, sm.p, sm.d_o);  // dV += P^T dO
      mma_accumulate<T, D, wmma::col_major>(sm.dk, sm.ds, sm.q);   // dK += dS^T Q
      __syncwarp();
    }
  }
  store_tile_rounded<T, D>(static_cast<T*>(p.dk), sm.dk, span.kv0 + b0, cols, p.heads_kv, g, lane);
  store_tile_rounded<T, D>(static_cast<T*>(p.dv), sm.dv, span.kv0 + b0, cols, p.heads_kv, g, lane);
}

template <class T, int D>
__global__ void __launch_bounds__(kWarpSize) attention_bwd_dkdv_kernel(AttentionBwdParams p, const int64_t* kv_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TileItem item = locate_tile(kv_tiles, p.docs, blockIdx.x);
  dkdv_tile<T, D>(p, doc_span(p, item.doc), static_cast<int>(blockIdx.y), item.tile, DkvSmem<T, D>(smem),
                  static_cast<int>(threadIdx.x));
}

template <class T, int D>
__device__ void dq_tile(const AttentionBwdParams& p, const DocSpan& span, int h, int64_t tile, const DqSmem<T, D>& sm,
                        int lane) {
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int g = kv_head_of(h, p.heads_q, p.heads_kv);
  const int64_t a0 = tile * kTileQ;
  const int rows = static_cast<int>(span.lq - a0 < kTileQ ? span.lq - a0 : kTileQ);
  load_tile<T, D>(sm.q, static_cast<const T*>(p.q), span.q0 + a0, rows, p.heads_q, h, lane);
  load_tile<T, D>(sm.d_o, static_cast<const T*>(p.d_o), span.q0 + a0, rows, p.heads_q, h, lane);
  zero_tile<D>(sm.dq, lane);
  __syncwarp();  // the store reads what other lanes zeroed, even when no kv tile is visited
  float lse, delta;
  load_row_stats(p, span, h, a0, rows, lane, &lse, &delta);

  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, span.lq, span.lkv, kTileKv);
  for (int64_t j = kv.begin; j < kv.end; ++j) {
    const int64_t b0 = j * kTileKv;
    const int cols = static_cast<int>(span.lkv - b0 < kTileKv ? span.lkv - b0 : kTileKv);
    load_tile<T, D>(sm.k, k, span.kv0 + b0, cols, p.heads_kv, g, lane);
    load_tile<T, D>(sm.v, v, span.kv0 + b0, cols, p.heads_kv, g, lane);
    __syncwarp();
    mma_abt<T, D>(sm.s, sm.q, sm.k);     // S = Q K^T
    mma_abt<T, D>(sm.dp, sm.d_o, sm.v);  // dP = dO V^T
    __syncwarp();
    if (lane < kTileQ)
      backward_row<T>(p, span, a0 + lane, b0, lse, delta, sm.s + lane * kLdS, sm.dp + lane * kLdS, nullptr,
                      sm.ds + lane * kLdP);
    __syncwarp();
    mma_accumulate<T, D, wmma::row_major>(sm.dq, sm.ds, sm.k);  // dQ += dS K
    __syncwarp();
  }
  store_tile_rounded<T, D>(static_cast<T*>(p.dq), sm.dq, span.q0 + a0, rows, p.heads_q, h, lane);
}

template <class T, int D>
__global__ void __launch_bounds__(kWarpSize) attention_bwd_dq_kernel(AttentionBwdParams p, const int64_t* q_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TileItem item = locate_tile(q_tiles, p.docs, blockIdx.x);
  dq_tile<T, D>(p, doc_span(p, item.doc), static_cast<int>(blockIdx.y), item.tile, DqSmem<T, D>(smem),
                static_cast<int>(threadIdx.x));
}

__global__ void fill_kernel(float* x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

// ------------------------------------------------------------------ dispatch (the one place)
template <class T, int D>
struct Instance {
  using Type = T;
  static constexpr int kDim = D;
};
template <class T>
struct TypeTag {
  using Type = T;
};

// The instantiation grid: {fp16, bf16} x head dim {64, 128, 256}. Calls
// f(Instance<T, D>{}) and returns true, or returns false for anything else.
template <class F>
bool dispatch(int dtype, int head_dim, F&& f) {
  auto by_head_dim = [&](auto type) {
    using T = typename decltype(type)::Type;
    switch (head_dim) {
      case 64: f(Instance<T, 64>{}); return true;
      case 128: f(Instance<T, 128>{}); return true;
      case 256: f(Instance<T, 256>{}); return true;
      default: return false;
    }
  };
  if (dtype == kFp16) return by_head_dim(TypeTag<__half>{});
  if (dtype == kBf16) return by_head_dim(TypeTag<__nv_bfloat16>{});
  return false;
}

// ------------------------------------------------------------------ host side

bool fail(std::string& failure, const std::string& what, cudaError_t e = cudaGetLastError()) {
  failure = what + ": " + cudaGetErrorString(e);
  return false;
}

// Per-document tile prefix [docs + 1] from cu_seqlens: prefix[d] = tiles before document d.
std::vector<int64_t> tile_prefix(const std::vector<int64_t>& cu_seqlens, int64_t tile) {
  std::vector<int64_t> prefix(cu_seqlens.size(), 0);
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d)
    prefix[d + 1] = prefix[d] + (cu_seqlens[d + 1] - cu_seqlens[d] + tile - 1) / tile;
  return prefix;
}

// One launch over (tiles, heads) blocks of one warp; raises the dynamic shared
// memory limit past the default 48 KiB where a kernel needs it (dK/dV and dQ at D = 256).
template <class Params>
bool launch(void (*kernel)(Params, const int64_t*), int64_t tiles, int heads, size_t smem_bytes, const Params& p,
            const int64_t* prefix, std::string& failure, const char* name) {
  if (tiles == 0 || heads == 0) return true;
  int device = 0, optin = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (smem_bytes > size_t(optin)) {
    failure = std::string(name) + " needs " + std::to_string(smem_bytes) + " B of shared memory, the device allows " +
              std::to_string(optin);
    return false;
  }
  if (tiles > INT_MAX || heads > 65535) {
    failure = std::string(name) + ": grid of " + std::to_string(tiles) + " tiles x " + std::to_string(heads) +
              " heads exceeds CUDA's grid limits";
    return false;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)) != cudaSuccess)
    return fail(failure, std::string(name) + " shared memory attribute");
  kernel<<<dim3(unsigned(tiles), unsigned(heads)), kWarpSize, smem_bytes>>>(p, prefix);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(failure, name, e);
  return true;
}

struct Grids {
  const int64_t* q_prefix;   // device [docs + 1]
  const int64_t* kv_prefix;  // device [docs + 1]
  int64_t q_tiles, kv_tiles;
  const int64_t* flash_q_prefix = nullptr;  // device [docs + 1], tiles of flash::forward_block_m rows
  int64_t flash_q_tiles = 0;
  flash::BackwardGrid flash_bwd{};  // its prefixes set: the CuTe backward (cuda-next)
};

bool run_forward(const AttentionFwdParams& p, const Grids& grid, std::string& failure) {
  if (grid.flash_q_prefix) return flash::forward(p, grid.flash_q_prefix, grid.flash_q_tiles, failure);
  bool ok = true;
  dispatch(p.dtype, p.head_dim, [&](auto instance) {
    using T = typename decltype(instance)::Type;
    constexpr int D = decltype(instance)::kDim;
    ok = launch(attention_fwd_kernel<T, D>, grid.q_tiles, p.heads_q, FwdSmem<T, D>::kBytes, p, grid.q_prefix, failure,
                "attention_fwd_kernel");
  });
  return ok;
}

bool run_backward(const AttentionBwdParams& p, const Grids& grid, std::string& failure) {
  if (grid.flash_bwd.kv_block_prefix) return flash::backward(p, grid.flash_bwd, failure);
  bool ok = true;
  dispatch(p.dtype, p.head_dim, [&](auto instance) {
    using T = typename decltype(instance)::Type;
    constexpr int D = decltype(instance)::kDim;
    ok = launch(attention_bwd_delta_kernel<T, D>, grid.q_tiles, p.heads_q, DeltaSmem<D>::kBytes, p, grid.q_prefix,
                failure, "attention_bwd_delta_kernel") &&
         launch(attention_bwd_dkdv_kernel<T, D>, grid.kv_tiles, p.heads_kv, DkvSmem<T, D>::kBytes, p,
                grid.kv_prefix, failure, "attention_bwd_dkdv_kernel") &&
         launch(attention_bwd_dq_kernel<T, D>, grid.q_tiles, p.heads_q, DqSmem<T, D>::kBytes, p, grid.q_prefix,
                failure, "attention_bwd_dq_kernel");
  });
  return ok;
}


}  // namespace

bool attention_kernels_instantiated(int dtype, int head_dim, bool next) {
  return dispatch(dtype, head_dim, [](auto) {}) && (!next || flash::built());
}

bool attention_on_device(const DeviceAttentionInputs& in, DeviceAttentionOutputs& out) {
  const AttentionFwdParams& shape = in.params;
  if (!attention_kernels_instantiated(shape.dtype, shape.head_dim, in.next)) {
    out.failure = "no kernel for dtype " + std::to_string(shape.dtype) + " and head_dim " +
                  std::to_string(shape.head_dim);
    return false;
  }
  const size_t q_elems = size_t(shape.total_q) * shape.heads_q * shape.head_dim;
  const size_t kv_elems = size_t(shape.total_kv) * shape.heads_kv * shape.head_dim;
  const size_t lse_elems = size_t(shape.total_q) * shape.heads_q;
  const size_t meta = size_t(shape.docs) + 1;
  if (in.q.size() != q_elems || in.k.size() != kv_elems || in.v.size() != kv_elems ||
      (in.backward && in.d_o.size() != q_elems) || in.cu_seqlens_q.size() != meta ||
      in.cu_seqlens_kv.size() != meta || in.ragged_offsets_q.size() != meta || in.ragged_offsets_kv.size() != meta) {
    out.failure = "attention_on_device: host arrays do not match the params' sizes";
    return false;
  }

  DeviceArray<int64_t> cu_q(meta), cu_kv(meta), ragged_q(meta), ragged_kv(meta), q_prefix(meta), kv_prefix(meta);
  DeviceArray<uint16_t> q(q_elems), k(kv_elems), v(kv_elems), o(q_elems);
  DeviceArray<float> lse(lse_elems);
  const std::vector<int64_t> q_prefix_host = tile_prefix(in.cu_seqlens_q, kTileQ);
  const std::vector<int64_t> kv_prefix_host = tile_prefix(in.cu_seqlens_kv, kTileKv);
  if (!cu_q.ok() || !cu_kv.ok() || !ragged_q.ok() || !ragged_kv.ok() || !q_prefix.ok() || !kv_prefix.ok() ||
      !q.ok() || !k.ok() || !v.ok() || !o.ok() || !lse.ok())
    return fail(out.failure, "allocation");
  if (!cu_q.upload(in.cu_seqlens_q) || !cu_kv.upload(in.cu_seqlens_kv) || !ragged_q.upload(in.ragged_offsets_q) ||
      !ragged_kv.upload(in.ragged_offsets_kv) || !q_prefix.upload(q_prefix_host) ||
      !kv_prefix.upload(kv_prefix_host) || !q.upload(in.q) || !k.upload(in.k) || !v.upload(in.v))
    return fail(out.failure, "upload");

  AttentionFwdParams p = shape;
  p.q = q.ptr, p.k = k.ptr, p.v = v.ptr, p.o = o.ptr, p.lse = lse.ptr;
  p.cu_seqlens_q = cu_q.ptr, p.cu_seqlens_kv = cu_kv.ptr;
  p.ragged_offsets_q = ragged_q.ptr, p.ragged_offsets_kv = ragged_kv.ptr;
  Grids grid{q_prefix.ptr, kv_prefix.ptr, q_prefix_host.back(), kv_prefix_host.back()};
  const std::vector<int64_t> flash_prefix_host =
      in.next ? tile_prefix(in.cu_seqlens_q, flash::forward_block_m(shape.head_dim)) : std::vector<int64_t>{};
  DeviceArray<int64_t> flash_prefix(flash_prefix_host.size());
  if (in.next) {
    if (!flash_prefix.ok() || !flash_prefix.upload(flash_prefix_host)) return fail(out.failure, "upload");
    grid.flash_q_prefix = flash_prefix.ptr, grid.flash_q_tiles = flash_prefix_host.back();
  }
  // cuda-next's backward: the CuTe kernels' own blocks (flash_tile.hpp).
  const bool flash_bwd = in.next && in.backward;
  const std::vector<int64_t> flash_kv_host =
      flash_bwd ? tile_prefix(in.cu_seqlens_kv, flash::backward_kv_block(shape.head_dim)) : std::vector<int64_t>{};
  const std::vector<int64_t> flash_dq_host =
      flash_bwd ? tile_prefix(in.cu_seqlens_q, flash::backward_q_block(shape.head_dim)) : std::vector<int64_t>{};
  DeviceArray<int64_t> flash_kv(flash_kv_host.size()), flash_dq(flash_dq_host.size());
  if (flash_bwd) {
    if (!flash_kv.ok() || !flash_dq.ok() || !flash_kv.upload(flash_kv_host) || !flash_dq.upload(flash_dq_host))
      return fail(out.failure, "upload");
    grid.flash_bwd = flash::BackwardGrid{flash_kv.ptr, flash_kv_host.back(), flash_dq.ptr, flash_dq_host.back()};
  }

  // Tokens outside every document keep these: o = 0, lse = -inf.
  if (!o.zero()) return fail(out.failure, "o fill");
  if (lse_elems > 0) {
    fill_kernel<<<unsigned(std::min<size_t>((lse_elems + 255) / 256, 4096)), 256>>>(lse.ptr, int64_t(lse_elems),
                                                                                     -INFINITY);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(out.failure, "lse fill", e);
  }
  if (!run_forward(p, grid, out.failure)) return false;

  AttentionBwdParams b;
  static_cast<AttentionFwdParams&>(b) = p;
  DeviceArray<uint16_t> d_o(in.backward ? q_elems : 0), dq(in.backward ? q_elems : 0);
  DeviceArray<uint16_t> dk(in.backward ? kv_elems : 0), dv(in.backward ? kv_elems : 0);
  DeviceArray<float> delta(in.backward ? lse_elems : 0);
  if (in.backward) {
    if (!d_o.ok() || !dq.ok() || !dk.ok() || !dv.ok() || !delta.ok()) return fail(out.failure, "allocation");
    if (!d_o.upload(in.d_o)) return fail(out.failure, "upload");
    // Tokens outside every document: dq = dk = dv = 0 (delta is never read there).
    if (!dq.zero() || !dk.zero() || !dv.zero() || !delta.zero()) return fail(out.failure, "gradient fill");
    b.d_o = d_o.ptr, b.lse_in = lse.ptr, b.o_in = o.ptr, b.dq = dq.ptr, b.dk = dk.ptr, b.dv = dv.ptr;
    b.delta = delta.ptr;
    b.dq_accum = nullptr;   // dQ has its own pass (deterministic): no fp32 accumulator in memory
    b.deterministic = true;
    if (!run_backward(b, grid, out.failure)) return false;
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail(out.failure, "attention kernels", e);

  if (in.timing_reps > 0) {  // every pass rewrites the same outputs: rerunning is harmless
    out.fwd_ms = median_event_ms(in.timing_reps, [&] { return run_forward(p, grid, out.failure); });
    if (in.backward) out.bwd_ms = median_event_ms(in.timing_reps, [&] { return run_backward(b, grid, out.failure); });
    if (out.fwd_ms < 0 || out.bwd_ms < 0) return false;
  }

  if (!o.download(out.o) || !lse.download(out.lse)) return fail(out.failure, "download");
  if (in.backward && (!dq.download(out.dq) || !dk.download(out.dk) || !dv.download(out.dv)))
    return fail(out.failure, "download");
  return true;
}

}  // namespace attn_oracle::gpu
