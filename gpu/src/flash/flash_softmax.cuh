// flash_softmax.cuh: the forward's row steps on registers, shared by the SM80
// kernel (flash_fwd.cu) and the Hopper one (flash_fwd_sm90.cu): scores -> P with
// the online softmax of flash_tile.hpp, O rescaled, and the rows' final O / l and
// lse. Both kernels' accumulators, seen as (rows, cols) (rowcol, rowcol_gmma), give
// a row's values to the 4 threads of a quad: max and sum reduce by two shuffles.
#pragma once

#include <cuda_runtime.h>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "flash/flash_device.cuh"

namespace attn_oracle::gpu::flash {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// The running softmax of one thread's rows; l holds this thread's columns only
// until the end (a sum is linear in its parts, rescaling included).
template <int kRows>
struct RowState {
  float m[kRows], l[kRows];
  __device__ void reset() {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  }
};

// Scores (raw q . k) -> P in place and the rows' state: one kv tile. Each row's
// alpha goes to rescale(i, alpha) as soon as it is known: the SM80 kernel rescales
// O there, in the row loop; the Hopper kernel keeps it and rescales O
// (rescale_rows) once the previous tile's P V has landed. Not forced inline: forced,
// this and softmax_tile_scores left the SM80 forward at 216 registers at D = 128 and
// with 8 bytes of spills at D = 256 (ptxas -v, sm_90a), against 214 and none.
template <bool kMasked, int kBlockN, class S, class C, int kRows, class Rescale>
__device__ void softmax_scores(S& s, const C& coord, RowState<kRows>& st, const AttentionFwdParams& p,
                                               const DocSpan& span, int64_t a0, int64_t b0, float scale_log2,
                                               const Rescale& rescale) {
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) {
    TileKeys keys{0, kBlockN - 1};
    if (kMasked) keys = tile_keys<kBlockN>(p, span, a0 + get<0>(coord(i, 0)), b0);
    float row_max = st.m[i];
    CUTE_UNROLL
    for (int j = 0; j < size<1>(s); ++j) {
      const int b = get<1>(coord(i, j));
      const float x = score_log2(s(i, j), scale_log2);
      s(i, j) = !kMasked || (b >= keys.lo && b <= keys.hi) ? x : -INFINITY;
      row_max = fmaxf(row_max, s(i, j));
    }
    row_max = quad_max(row_max);
    const float alpha = rescale_factor(st.m[i], row_max);
    st.m[i] = row_max;
    float sum = 0.0f;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(s); ++j) {
      s(i, j) = softmax_weight(s(i, j), row_max);
      sum += s(i, j);
    }
    st.l[i] = st.l[i] * alpha + sum;
    rescale(i, alpha);
  }
}

// rescale(i, alpha) of the SM80 kernel: O's row i times alpha, in the row loop.
template <class O>
struct RescaleRow {
  O& o;
  __device__ __forceinline__ void operator()(int i, float alpha) const {
    CUTE_UNROLL
    for (int j = 0; j < size<1>(o); ++j) o(i, j) *= alpha;
  }
};

// rescale(i, alpha) of the Hopper kernel: alpha kept for rescale_rows, later.
template <int kRows>
struct RescaleLater {
  float (&alpha)[kRows];
  __device__ __forceinline__ void operator()(int i, float a) const { alpha[i] = a; }
};

// O's rows times the last tile's alpha (the Hopper kernel, after RescaleLater).
template <class O, int kRows>
__device__ __forceinline__ void rescale_rows(O& o, const float (&alpha)[kRows]) {
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) {
    CUTE_UNROLL
    for (int j = 0; j < size<1>(o); ++j) o(i, j) *= alpha[i];
  }
}

// One tile's row steps, the per-element mask only where the tile is not wholly
// allowed (tile_fully_allowed: the result is the same, only cheaper).
template <int kBlockN, class S, class C, int kRows, class Rescale>
__device__ void softmax_tile_scores(S& s, const C& coord, RowState<kRows>& st,
                                                    const AttentionFwdParams& p, const DocSpan& span, int64_t a0,
                                                    int rows, int64_t b0, float scale_log2, const Rescale& rescale) {
  if (tile_fully_allowed(p.mask, p.window_left, p.window_right, a0, a0 + rows, b0, b0 + kBlockN, span.lq, span.lkv))
    softmax_scores<false, kBlockN>(s, coord, st, p, span, a0, b0, scale_log2, rescale);
  else
    softmax_scores<true, kBlockN>(s, coord, st, p, span, a0, b0, scale_log2, rescale);
}

// Finally O / l, and each row's lse by the thread holding its column 0 (rows past
// the document's `rows` are never stored).
template <class O, class C, int kRows>
__device__ __forceinline__ void finish_rows(O& o, const C& coord, const RowState<kRows>& st,
                                            const AttentionFwdParams& p, const DocSpan& span, int h, int64_t a0,
                                            int rows) {
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) {
    const float l = quad_sum(st.l[i]);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(o); ++j) o(i, j) *= inv;
    const int r = get<0>(coord(i, 0));
    if (get<1>(coord(i, 0)) == 0 && r < rows)
      p.lse[int64_t(h) * p.total_q + span.q0 + a0 + r] = lse_from_log2(st.m[i], l);
  }
}

}  // namespace attn_oracle::gpu::flash
