// flash_fwd_sm90.cu: the Hopper attention forward of the `cuda-sm90` backend
// (CuTe, warpgroup MMA and TMA, built for sm_90a only), fp16 / bf16 storage, head
// dims 64 / 128 / 256. The arithmetic is the SM80 forward's (flash_tile.hpp) on
// flash_forward_tile(D, FlashArch::sm90)'s tiles; the twin runs the same schedule.
//
// One block of three warpgroups per (document, query head, q tile of 128 rows),
// the grid as the SM80 forward's (block_tile, longest causal rows first):
//  - the producer warpgroup gives its registers away (setmaxnreg) and one of its
//    threads issues the TMA copies: Q once, then K and V of each key tile of
//    kv_tile_range into kStages stages, a stage reused once both consumers have
//    released it (an mbarrier each way);
//  - two consumer warpgroups, 64 query rows each: S = Q K^T by wgmma from shared
//    memory; while the row steps of flash_softmax.cuh run on S, the previous
//    tile's O += P V (P from registers, V^T from shared memory) is still on the
//    tensor cores; O is rescaled once it has landed, and that tile's stage freed.
//    Finally O / l straight from the registers to global memory, lse.
// TMA reads whole tiles: rows past a document are its neighbour's tokens (or zeros
// past the tensor), finite by the seam's checks, masked by the row's key interval
// (tile_keys) and never stored, as the SM80 kernel's zero-filled rows are.
// Past what TMA's 32-bit coordinates address, or with no query or no key tokens at
// all (no tensor to describe: the backward's dK / dV blocks would still encode Q's),
// the kernels are the SM80 ones (forward_sm90_fits, attention_device.cu).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "flash/flash_config.hpp"
#include "flash/flash_config_sm90.hpp"
#include "flash/flash_device.cuh"
#include "flash/flash_launch.hpp"
#include "flash/flash_sm90.cuh"
#include "flash/flash_softmax.cuh"

namespace attn_oracle::gpu::flash {
namespace {

template <class Cfg>
using TmaQ = TmaTile<typename Cfg::Element, Cfg::kDim, typename Cfg::SmemQ>;
template <class Cfg>
using TmaKV = TmaTile<typename Cfg::Element, Cfg::kDim, decltype(take<0, 2>(typename Cfg::SmemKV{}))>;

// What the kernel reads from its parameter space: TMA descriptors must live there.
template <class Cfg>
struct Sm90Params {
  AttentionFwdParams p;
  const int64_t* q_tiles;
  TmaQ<Cfg> tma_q;
  TmaKV<Cfg> tma_k, tma_v;
};

// The producer: Q, then every key tile's K and V into its stage once it is free.
template <class Cfg>
__device__ void produce(const Sm90Params<Cfg>& params, SharedSm90<Cfg>& shared, const BlockTile<Cfg::kDim>& tile,
                        int h, int g, const TileRange& kv) {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim, S = Cfg::kStages;
  const AttentionFwdParams& p = params.p;
  Tensor gQ = tma_rows<BM, D>(params.tma_q, p.total_q, p.heads_q, tile.span.q0 + tile.first, h);
  Tensor sQ = make_tensor(make_smem_ptr(shared.q), typename Cfg::SmemQ{});
  auto [tQg, tQs] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  FullBarrier::arrive_and_expect_tx(&shared.q_full, Cfg::kQBytes);
  copy(params.tma_q.with(shared.q_full), tQg, tQs);

  produce_key_tiles<typename Cfg::SmemKV, BN, D, S>(params.tma_k, params.tma_v, p, tile.span, g, kv, shared.k,
                                                    shared.v, shared.k_full, shared.v_full, shared.kv_empty,
                                                    Cfg::kKVStageBytes);
}

// A consumer warpgroup's 64 rows of the tile (thread ct of the two groups' 256).
template <class Cfg>
__device__ void consume(const AttentionFwdParams& p, SharedSm90<Cfg>& shared, const BlockTile<Cfg::kDim>& tile, int h,
                        const TileRange& kv, int ct) {
  using T = typename Cfg::Element;
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim, S = Cfg::kStages;
  typename Cfg::MmaQK mma_qk;
  typename Cfg::MmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(ct);
  auto thr_pv = mma_pv.get_thread_slice(ct);
  Tensor tSrQ = thr_qk.partition_fragment_A(make_tensor(make_smem_ptr(shared.q), typename Cfg::SmemQ{}));
  Tensor tSrK = thr_qk.partition_fragment_B(make_tensor(make_smem_ptr(shared.k), typename Cfg::SmemKV{}));
  Tensor tOrVt = thr_pv.partition_fragment_B(make_tensor(make_smem_ptr(shared.v), typename Cfg::SmemVt{}));
  Tensor acc_o = partition_fragment_C(mma_pv, Shape<Int<BM>, Int<D>>{});
  clear(acc_o);
  Tensor p_tile = make_tensor_like<T>(partition_fragment_C(mma_qk, Shape<Int<BM>, Int<BN>>{}));
  Tensor rP = make_tensor(p_tile.data(), acc_as_a_gmma(p_tile.layout()));
  Tensor cS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  Tensor cO = thr_pv.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
  Tensor o_rc = make_tensor(acc_o.data(), rowcol_gmma(acc_o.layout()));
  Tensor cs_rc = make_tensor(cS.data(), rowcol_gmma(cS.layout()));
  Tensor co_rc = make_tensor(cO.data(), rowcol_gmma(cO.layout()));
  constexpr int kRows = decltype(size<0>(co_rc))::value;
  RowState<kRows> st;
  st.reset();
  float alpha[kRows];  // the last tile's, until O is free to be rescaled
  const float scale_log2 = p.scale * kLog2e;
  const int tiles = int(kv.end - kv.begin);

  // S of tile i, committed; a fresh accumulator each tile, so that no register the
  // row steps wrote is an input of the next wgmma (ptxas would serialize them).
  auto scores = [&](int i) {
    Tensor acc_s = partition_fragment_C(mma_qk, Shape<Int<BM>, Int<BN>>{});
    FullBarrier::wait(&shared.k_full[i % S], (i / S) & 1);
    wgmma_batch<true, false>(mma_qk, tSrQ, tSrK(_, _, _, i % S), acc_s);
    return acc_s;
  };
  auto pv = [&](int i) {  // O += P V of tile i, committed
    FullBarrier::wait(&shared.v_full[i % S], (i / S) & 1);
    wgmma_batch<false, true>(mma_pv, rP, tOrVt(_, _, _, i % S), acc_o);
  };
  auto row_steps = [&](auto& acc_s, int i) {  // P of tile i, in acc_s
    Tensor s_rc = make_tensor(acc_s.data(), rowcol_gmma(acc_s.layout()));
    softmax_tile_scores<BN>(s_rc, cs_rc, st, p, tile.span, tile.first, tile.rows, (kv.begin + i) * BN, scale_log2,
                           RescaleLater<kRows>{alpha});
  };
  auto keep_p = [&](const auto& acc_s) {
    CUTE_UNROLL
    for (int e = 0; e < size(acc_s); ++e) p_tile(e) = T(acc_s(e));  // round to nearest even
  };

  FullBarrier::wait(&shared.q_full, 0);
  if (tiles > 0) {
    auto acc_s = scores(0);
    warpgroup_wait<0>();
    row_steps(acc_s, 0);  // O is still 0: nothing to rescale
    keep_p(acc_s);
  }
  for (int i = 1; i < tiles; ++i) {
    auto acc_s = scores(i);
    pv(i - 1);
    warpgroup_wait<1>();  // S of tile i has landed; P V of tile i - 1 may still run
    row_steps(acc_s, i);
    warpgroup_wait<0>();
    EmptyBarrier::arrive(&shared.kv_empty[(i - 1) % S]);
    rescale_rows(o_rc, alpha);
    keep_p(acc_s);
  }
  if (tiles > 0) {
    pv(tiles - 1);
    warpgroup_wait<0>();
  }
  finish_rows(o_rc, co_rc, st, p, tile.span, h, tile.first, tile.rows);
  store_pairs<T>(o_rc, co_rc, static_cast<T*>(p.o) + tile.q_offset(tile.first, h), tile.q_stride, tile.rows, 1.0f);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    forward_sm90_kernel(CUTLASS_GRID_CONSTANT const Sm90Params<Cfg> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  extern __shared__ unsigned char smem_raw[];
  auto& shared = aligned_shared<SharedSm90<Cfg>>(smem_raw);
  const AttentionFwdParams& p = params.p;
  const BlockTile<D> tile =
      block_tile<TileRows::queries, BM, D>(p, params.q_tiles, int64_t(gridDim.x) - 1 - blockIdx.x);
  const int h = blockIdx.y, g = kv_head_of(h, p.heads_q, p.heads_kv);
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, tile.first, tile.first + tile.rows,
                                     tile.span.lq, tile.span.lkv, BN);
  init_query_block_barriers<Cfg::kStages, Cfg::kConsumerThreads>(shared);
  if (threadIdx.x < 128) {  // the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x == 0) produce(params, shared, tile, h, g, kv);
  } else {
    cutlass::arch::warpgroup_reg_alloc<240>();
    consume(p, shared, tile, h, kv, int(threadIdx.x) - 128);
  }
#endif
}

}  // namespace

bool forward_sm90_fits(const AttentionFwdParams& p) {
  return p.total_q > 0 && p.total_q <= INT_MAX && p.total_kv > 0 && p.total_kv <= INT_MAX;
}

bool forward_sm90(const AttentionFwdParams& p, const int64_t* q_tile_prefix, int64_t q_tiles, std::string& failure) {
  if (q_tiles == 0 || p.heads_q == 0) return true;
  if (!forward_sm90_fits(p)) {
    failure = "flash forward (sm_90a): " + std::to_string(p.total_q) + " query and " + std::to_string(p.total_kv) +
              " key tokens are outside what TMA's 32-bit coordinates describe (1 to 2^31 - 1 of each)";
    return false;
  }
  return switch_flash_instance(p.dtype, p.head_dim, "flash forward (sm_90a)", failure, [&](auto instance) {
    using I = decltype(instance);
    using Cfg = ForwardSm90Config<typename I::Element, I::kDim>;
    using T = typename Cfg::Element;
    constexpr int D = Cfg::kDim;
    const Sm90Params<Cfg> params{p, q_tile_prefix,
                                 make_tma_tile<T, D>(p.q, p.total_q, p.heads_q, typename Cfg::SmemQ{}),
                                 make_tma_tile<T, D>(p.k, p.total_kv, p.heads_kv, take<0, 2>(typename Cfg::SmemKV{})),
                                 make_tma_tile<T, D>(p.v, p.total_kv, p.heads_kv, take<0, 2>(typename Cfg::SmemKV{}))};
    return launch_tiles<Sm90Launch<Cfg, SharedSm90<Cfg>>>(forward_sm90_kernel<Cfg>, "flash forward (sm_90a)", q_tiles,
                                                          "tiles", p.heads_q, 1, failure, params);
  });
}

}  // namespace attn_oracle::gpu::flash
