// flash_device.cuh: the device steps the tensor-core attention kernels share
// (flash_fwd.cu, flash_bwd_dkdv.cu, flash_bwd_dq.cu): where a block works and its
// global tiles, global tiles into shared memory by cp.async (the K/V stages of a
// query block among them), the two products (operands from shared memory through
// ldmatrix, or A already in registers), a row's allowed keys inside a key block, the
// backward's weights and score gradients (the Hopper backward's too), an fp32
// accumulator out to global memory through shared memory; and their launch.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "flash/flash_config.hpp"
#include "kernel_launch.cuh"

namespace attn_oracle::gpu::flash {

// Which rows a block's tile counts: query rows (forward, dQ) or keys (dK/dV).
enum class TileRows { queries, keys };

// Where a block works, read once from the metadata: its document, the document rows
// [first, first + rows) of its tile (the tile's rows past the document are
// zero-filled and never stored), and where a row starts in the THD tensors.
template <int D>
struct BlockTile {
  DocSpan span;
  int64_t first;
  int rows;
  int64_t q_stride, kv_stride;  // elements from one token to the next: heads * D

  // Document row a (b) at query head h (kv head g): its first element in q, o, dO
  // and dQ (k, v, dK and dV).
  __device__ int64_t q_offset(int64_t a, int h) const { return (span.q0 + a) * q_stride + int64_t(h) * D; }
  __device__ int64_t kv_offset(int64_t b, int g) const { return (span.kv0 + b) * kv_stride + int64_t(g) * D; }
};

// Block `block` of a grid flattened over the documents' tiles of kTile rows
// (tile_prefix: the tiles before each document, locate_tile). Forced inline, so that
// it joins the kernel before the kernel is optimized, as locate_tile and doc_span
// (ATTN_HD) do: inlined later, it left the forward at D = 256 with 36 bytes of
// spills (ptxas -v, sm_90).
template <TileRows kRows, int kTile, int D>
__device__ __forceinline__ BlockTile<D> block_tile(const AttentionFwdParams& p, const int64_t* tile_prefix, int64_t block) {
  const TileItem item = locate_tile(tile_prefix, p.docs, block);
  const DocSpan span = doc_span(p, item.doc);
  const int64_t first = item.tile * kTile, length = kRows == TileRows::queries ? span.lq : span.lkv;
  return BlockTile<D>{span, first, int(length - first < kTile ? length - first : kTile), int64_t(p.heads_q) * D,
                      int64_t(p.heads_kv) * D};
}

// A (kRows, D) tile of a [tokens, heads, D] tensor of T from element `offset`, tokens
// `stride` elements apart; read-only for the inputs.
template <class T, int kRows, int D>
__device__ auto global_tile(const void* tensor, int64_t offset, int64_t stride) {
  return make_tensor(make_gmem_ptr(static_cast<const T*>(tensor) + offset), Shape<Int<kRows>, Int<D>>{},
                     make_stride(stride, _1{}));
}
template <class T, int kRows, int D>
__device__ auto global_tile(void* tensor, int64_t offset, int64_t stride) {
  return make_tensor(make_gmem_ptr(static_cast<T*>(tensor) + offset), Shape<Int<kRows>, Int<D>>{},
                     make_stride(stride, _1{}));
}

// Rows [0, valid) of a (rows, D) global tile into shared memory by cp.async, the
// rest zero-filled; `coord` is the copy's partition of the tile's identity.
template <class Copy, class G, class S, class C>
__device__ void load_rows(const Copy& copy, const G& g, S&& s, const C& coord, int valid) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(s); ++m) {
    if (get<0>(coord(0, m, 0)) < valid) cute::copy(copy, g(_, m, _), s(_, m, _));
    else clear(s(_, m, _));
  }
}

// acc += A B^T over the K mode, both operands from shared memory through ldmatrix.
template <class Mma, class Acc, class RA, class SA, class CopyA, class RB, class SB, class CopyB>
__device__ void gemm_ss(const Mma& mma, Acc& acc, RA& ra, const SA& sa, const CopyA& copy_a, RB& rb, const SB& sb,
                        const CopyB& copy_b, int thread) {
  auto ra_view = copy_a.get_slice(thread).retile_D(ra);
  auto rb_view = copy_b.get_slice(thread).retile_D(rb);
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    cute::copy(copy_a, sa(_, _, k), ra_view(_, _, k));
    cute::copy(copy_b, sb(_, _, k), rb_view(_, _, k));
    cute::gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

// acc += A B^T with A already in registers.
template <class Mma, class Acc, class RA, class RB, class SB, class CopyB>
__device__ void gemm_rs(const Mma& mma, Acc& acc, const RA& ra, RB& rb, const SB& sb, const CopyB& copy_b, int thread) {
  auto rb_view = copy_b.get_slice(thread).retile_D(rb);
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    cute::copy(copy_b, sb(_, _, k), rb_view(_, _, k));
    cute::gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

// A tensor moved by `offset` elements, same layout: a stage of a double buffer, or
// a column part of a tile (a whole number of swizzle periods, so one partition
// serves them all).
template <class Tensor_, class Offset>
__device__ auto shifted(const Tensor_& t, Offset offset) {
  return make_tensor(t.data() + offset, t.layout());
}

// The K and V tiles a query block visits (forward, dQ), each into one of two
// shared-memory stages: stage s of K at smem_kv + 2 s kKV, V kKV after it. A stage
// is a whole number of swizzle periods, so one partition serves both stages, moved
// by a pointer offset; key tile n is the partition of tile 0 moved by n tiles of rows.
// Returns load(n, stage): key tile n of kv head g into that stage, by cp.async.
template <class Cfg, class LoadThr>
__device__ auto kv_stage_loader(const typename Cfg::GmemLoad& load, const LoadThr& load_thr,
                                const AttentionFwdParams& p, const BlockTile<Cfg::kDim>& tile, int g,
                                typename Cfg::Element* smem_kv) {
  using T = typename Cfg::Element;
  constexpr int BN = Cfg::kBlockN, D = Cfg::kDim, kKV = cosize(typename Cfg::SmemKV{});
  const int64_t kv_offset = tile.kv_offset(0, g), lkv = tile.span.lkv, kv_stride = tile.kv_stride;
  Tensor load_gK = load_thr.partition_S(global_tile<T, BN, D>(p.k, kv_offset, kv_stride));
  Tensor load_gV = load_thr.partition_S(global_tile<T, BN, D>(p.v, kv_offset, kv_stride));
  Tensor load_sK = load_thr.partition_D(make_tensor(make_smem_ptr(smem_kv), typename Cfg::SmemKV{}));
  Tensor load_sV = load_thr.partition_D(make_tensor(make_smem_ptr(smem_kv + kKV), typename Cfg::SmemKV{}));
  Tensor cKV = load_thr.partition_S(make_identity_tensor(Shape<Int<BN>, Int<D>>{}));
  return [=](int64_t n, int stage) {
    const int valid = int(lkv - n * BN < BN ? lkv - n * BN : BN);
    const int to = stage * 2 * kKV;
    const int64_t from = n * BN * kv_stride;
    load_rows(load, shifted(load_gK, from), shifted(load_sK, to), cKV, valid);
    load_rows(load, shifted(load_gV, from), shifted(load_sV, to), cKV, valid);
  };
}

// A query's allowed keys relative to a key block's first key b0, clamped to
// [-1, kBlockN] (32-bit: the per-element test is then two integer compares).
struct TileKeys {
  int lo, hi;
};

template <int kBlockN>
__device__ TileKeys tile_keys(const AttentionFwdParams& p, const DocSpan& span, int64_t a, int64_t b0) {
  if (a >= span.lq) return TileKeys{1, 0};  // a row past the document attends nothing
  const KeyInterval k = key_interval(p.mask, p.window_left, p.window_right, a, span.lq, span.lkv);
  auto clamp = [&](int64_t x) { return int(x - b0 < -1 ? -1 : x - b0 > kBlockN ? kBlockN : x - b0); };
  return TileKeys{clamp(k.lo), clamp(k.hi)};
}

// A query row's lse (base 2, lse_log2_of) and delta, read by the backward kernels;
// 0 and 0 for a row past the document (every entry of it is masked).
struct RowStats {
  float lse_log2, delta;
};

__device__ inline RowStats row_stats(const AttentionBwdParams& p, const DocSpan& span, int h, int64_t a) {
  if (a >= span.lq) return RowStats{0.0f, 0.0f};
  const int64_t i = int64_t(h) * p.total_q + span.q0 + a;
  return RowStats{lse_log2_of(p.lse_in[i]), p.delta[i]};
}

// The backward's weights in place of the raw scores: p = backward_weight (0 where
// masked: outside the row's TileKeys when kMasked, kMasked false on tiles that
// tile_fully_allowed says hold no masked pair). S with the queries as rows (dQ; a
// row's lse in `stats`) ...
template <bool kMasked, int kBlockN, class S, class C, int kRows>
__device__ void probabilities(S& s, const C& coord, const RowStats (&stats)[kRows], const AttentionFwdParams& p,
                              const DocSpan& span, int64_t a0, int64_t b0, float scale_log2) {
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) {
    TileKeys keys{0, kBlockN - 1};
    if (kMasked) keys = tile_keys<kBlockN>(p, span, a0 + get<0>(coord(i, 0)), b0);
    CUTE_UNROLL
    for (int j = 0; j < size<1>(s); ++j) {
      const int b = get<1>(coord(i, j));
      const float w = backward_weight(s(i, j), scale_log2, stats[i].lse_log2);
      s(i, j) = !kMasked || (b >= keys.lo && b <= keys.hi) ? w : 0.0f;
    }
  }
}

// ... or transposed, keys as rows and queries as columns (dK / dV); lse_log2(c): the
// lse (base 2) of the step's query column c.
template <bool kMasked, int kBlockN, class S, class C, class LseLog2>
__device__ void probabilities_t(S& s, const C& coord, const LseLog2& lse_log2, const AttentionFwdParams& p,
                                const DocSpan& span, int64_t a0, int64_t b0, float scale_log2) {
  CUTE_UNROLL
  for (int j = 0; j < size<1>(s); ++j) {
    const int c = get<1>(coord(0, j));
    const float lse2 = lse_log2(c);
    TileKeys keys{0, kBlockN - 1};
    if (kMasked) keys = tile_keys<kBlockN>(p, span, a0 + c, b0);
    CUTE_UNROLL
    for (int i = 0; i < size<0>(s); ++i) {
      const int r = get<0>(coord(i, j));
      const float w = backward_weight(s(i, j), scale_log2, lse2);
      s(i, j) = !kMasked || (r >= keys.lo && r <= keys.hi) ? w : 0.0f;
    }
  }
}

// dP^T -> ds^T in place (score_grad) beside p^T, queries as columns (dK / dV);
// delta[c]: query column c's delta.
template <class P, class Dp, class C>
__device__ void score_grads_t(const P& pt, Dp& dpt, const C& coord, const float* delta) {
  CUTE_UNROLL
  for (int j = 0; j < size<1>(dpt); ++j) {
    const float dj = delta[get<1>(coord(0, j))];
    CUTE_UNROLL
    for (int i = 0; i < size<0>(dpt); ++i) dpt(i, j) = score_grad(pt(i, j), dpt(i, j), dj);
  }
}

// An fp32 accumulator rounded to the storage type T (to nearest even).
template <class T, class Acc>
__device__ auto rounded(const Acc& acc) {
  Tensor out = make_tensor_like<T>(acc);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) out(i) = T(acc(i));
  return out;
}

// A fragment of the (rows, cols) tile `s` describes, already in the storage type,
// into rows [0, valid) of the global tile `g`: through the shared tile `s` (the
// caller has made it free for every thread), then 16-byte copies.
template <class Cfg, class Mma, class Frag, class S, class G>
__device__ void store_fragment(const Mma& mma, const Frag& out, const S& s, const G& g, int valid, int thread) {
  auto store_c = make_tiled_copy_C(typename Cfg::StoreC{}, mma);
  auto store_c_thr = store_c.get_slice(thread);
  cute::copy(store_c, store_c_thr.retile_S(out), store_c_thr.partition_D(s));
  __syncthreads();
  typename Cfg::GmemStore store;
  auto store_thr = store.get_slice(thread);
  Tensor so = store_thr.partition_S(s);
  Tensor go = store_thr.partition_D(g);
  Tensor rows = store_thr.partition_S(make_identity_tensor(product_each(shape(s))));
  Tensor ro = make_tensor_like(so);
  cute::copy(store, so, ro);
  CUTE_UNROLL
  for (int m = 0; m < size<1>(ro); ++m)
    if (get<0>(rows(0, m, 0)) < valid) cute::copy(store, ro(_, m, _), go(_, m, _));
}

// The same from an fp32 accumulator, rounded here, past the caller's barrier. The
// registers decide which: rounding before the barrier kept the forward at D = 256
// from spilling (28 B otherwise), and put dK/dV into a spill (8 B); ptxas -v in
// bench/results/*-build-evidence.md.
template <class Cfg, class Mma, class Acc, class S, class G>
__device__ void store_accumulator(const Mma& mma, const Acc& acc, const S& s, const G& g, int valid, int thread) {
  using T = typename Cfg::Element;
  Tensor out = make_tensor_like<T>(acc);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) out(i) = T(acc(i));  // round to nearest even
  store_fragment<Cfg>(mma, out, s, g, valid, thread);
}

// Launches a kernel of configuration Cfg over its grid flattened over the documents'
// tiles ("tiles" or "blocks", as `unit` says) x heads x parts: nothing to do without
// tiles or heads; false with `failure` past CUDA's grid limits or on a CUDA error.
template <class Cfg, class... Params, class... Args>
bool launch_tiles(void (*kernel)(Params...), const char* name, int64_t tiles, const char* unit, int heads,
                  unsigned parts, std::string& failure, const Args&... args) {
  if (tiles == 0 || heads == 0) return true;
  if (tiles > INT_MAX || heads > 65535) {
    failure = std::string(name) + ": grid of " + std::to_string(tiles) + " " + unit + " x " + std::to_string(heads) +
              " heads exceeds CUDA's grid limits";
    return false;
  }
  return launch_kernel(kernel, dim3(unsigned(tiles), unsigned(heads), parts), Cfg::kThreads, Cfg::kSmemBytes, name,
                       failure, args...);
}

}  // namespace attn_oracle::gpu::flash
