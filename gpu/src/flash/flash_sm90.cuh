// flash_sm90.cuh: the device steps the Hopper attention kernels share
// (flash_fwd_sm90.cu, flash_bwd_sm90.cu): the THD tensors as TMA addresses them,
// the mbarriers, the producer's loop over key tiles, a batch of warpgroup MMAs, an accumulator's column pairs stored
// straight from registers, the shared memory aligned for the 128-byte swizzle.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/device_kernel.h>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "flash/flash_config_sm90.hpp"

namespace attn_oracle::gpu::flash {

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;  // TMA bytes (and arrivals) landed
using EmptyBarrier = cutlass::arch::ClusterBarrier;            // a stage free again

// A [tokens, heads, D] tensor as TMA addresses it: (token, d, head).
template <class T, int D>
auto tma_view(const void* x, int64_t tokens, int heads) {
  return make_tensor(make_gmem_ptr(static_cast<const T*>(x)), make_shape(int(tokens), Int<D>{}, heads),
                     make_stride(int64_t(heads) * D, _1{}, Int<D>{}));
}

// The TMA load of a (rows, D) tile of shared-memory layout Smem from such a tensor.
template <class T, int D, class Smem>
using TmaTile = decltype(make_tma_copy(SM90_TMA_LOAD{}, tma_view<T, D>(nullptr, 1, 1), Smem{}));

template <class T, int D, class Smem>
TmaTile<T, D, Smem> make_tma_tile(const void* x, int64_t tokens, int heads, Smem smem) {
  return make_tma_copy(SM90_TMA_LOAD{}, tma_view<T, D>(x, tokens, heads), smem);
}

// A (rows, D) tile of that tensor from token `row` at head `head`, in TMA coordinates.
template <int kRows, int D, class Tma>
__device__ auto tma_rows(const Tma& tma, int64_t tokens, int heads, int64_t row, int head) {
  Tensor m = tma.get_tma_tensor(make_shape(int(tokens), Int<D>{}, heads));
  return local_tile(domain_offset(make_coord(int(row), _0{}), m(_, _, head)), Shape<Int<kRows>, Int<D>>{},
                    make_coord(_0{}, _0{}));
}

// The same, as consecutive (rows, D) tiles: (rows, D, tile).
template <int kRows, int D, class Tma>
__device__ auto tma_row_tiles(const Tma& tma, int64_t tokens, int heads, int64_t row, int head) {
  Tensor m = tma.get_tma_tensor(make_shape(int(tokens), Int<D>{}, heads));
  return local_tile(domain_offset(make_coord(int(row), _0{}), m(_, _, head)), Shape<Int<kRows>, Int<D>>{},
                    make_coord(_, _0{}));
}

// The barriers of a query block's kernel (forward, dQ), by thread 0, before any
// thread passes: Q (and dO) landed once; K and V of a stage landed; a stage free,
// once every consumer thread has arrived.
template <int kStages, int kConsumerThreads, class Shared>
__device__ void init_query_block_barriers(Shared& sh) {
  if (threadIdx.x == 0) {
    FullBarrier::init(&sh.q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      FullBarrier::init(&sh.k_full[s], 1);
      FullBarrier::init(&sh.v_full[s], 1);
      EmptyBarrier::init(&sh.kv_empty[s], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
}

// The producer's loop over a query block's key tiles (forward, dQ): K and V of key
// tile kv.begin + i (kv head g of `span`'s document) into stage i % kStages of
// smem_k / smem_v (staged layout Smem) by TMA, once the consumers have released
// that stage (kv_empty) from tile i - kStages; k_full / v_full count the bytes.
template <class Smem, int kRows, int D, int kStages, class Tma, class T>
__device__ void produce_key_tiles(const Tma& tma_k, const Tma& tma_v, const AttentionFwdParams& p, const DocSpan& span,
                                  int g, const TileRange& kv, T* smem_k, T* smem_v, uint64_t* k_full, uint64_t* v_full,
                                  uint64_t* kv_empty, uint32_t stage_bytes) {
  auto key_tiles = [&](const Tma& tma, T* smem) {
    Tensor gx = tma_row_tiles<kRows, D>(tma, p.total_kv, p.heads_kv, span.kv0, g);  // (rows, D, tile)
    Tensor sx = make_tensor(make_smem_ptr(smem), Smem{});                             // (rows, D, stage)
    return tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sx), group_modes<0, 2>(gx));
  };
  auto [tKg, tKs] = key_tiles(tma_k, smem_k);
  auto [tVg, tVs] = key_tiles(tma_v, smem_v);
  for (int i = 0; i < int(kv.end - kv.begin); ++i) {
    const int s = i % kStages, n = int(kv.begin) + i;
    if (i >= kStages) EmptyBarrier::wait(&kv_empty[s], ((i / kStages) & 1) ^ 1);  // tile i - kStages released it
    FullBarrier::arrive_and_expect_tx(&k_full[s], stage_bytes);
    copy(tma_k.with(k_full[s]), tKg(_, n), tKs(_, s));
    FullBarrier::arrive_and_expect_tx(&v_full[s], stage_bytes);
    copy(tma_v.with(v_full[s]), tVg(_, n), tVs(_, s));
  }
}

// The launch's shape: dynamic shared memory with room to align it to 1024 bytes.
template <class Cfg, class Shared>
struct Sm90Launch {
  static constexpr int kThreads = Cfg::kThreads;
  static constexpr size_t kSmemBytes = sizeof(Shared) + 1024;
};

// The dynamic shared memory as `Shared`, at a 1024-byte boundary (the swizzle's period).
template <class Shared>
__device__ Shared& aligned_shared(unsigned char* raw) {
  return *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

// acc (+)= A B over the k-blocks as one batch of wgmma, committed, not awaited; A
// from registers (kRegisterA, fenced as the accumulator is) or shared memory.
template <bool kZeroInit, bool kRegisterA, class Mma, class A, class B, class C>
__device__ __forceinline__ void wgmma_batch(Mma& mma, A& a, const B& b, C& acc) {
  warpgroup_fence_operand(acc);
  if constexpr (kRegisterA) warpgroup_fence_operand(a);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(acc);
  if constexpr (kRegisterA) warpgroup_fence_operand(a);
}

// An accumulator seen as (rows, cols) (rowcol_gmma), times `factor`, rounded to T
// and stored by pairs of neighbouring columns (32 bits a store) for rows [0, rows)
// of the tile at `out`, rows `row_stride` elements apart.
template <class T, class Acc, class C>
__device__ void store_pairs(const Acc& acc, const C& coord, T* out, int64_t row_stride, int rows, float factor) {
  CUTE_UNROLL
  for (int i = 0; i < size<0>(acc); ++i) {
    const int r = get<0>(coord(i, 0));
    if (r >= rows) continue;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(acc); j += 2) {
      const T lo = T(acc(i, j) * factor), hi = T(acc(i, j + 1) * factor);  // round to nearest even
      const uint32_t bits = uint32_t(lo.raw()) | (uint32_t(hi.raw()) << 16);
      *reinterpret_cast<uint32_t*>(out + r * row_stride + get<1>(coord(i, j))) = bits;
    }
  }
}

}  // namespace attn_oracle::gpu::flash
