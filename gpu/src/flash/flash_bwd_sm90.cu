// flash_bwd_sm90.cu: the Hopper attention backward of the `cuda-sm90` backend
// (CuTe, warpgroup MMA and TMA, built for sm_90a only), fp16 / bf16, head dims 64,
// 128 and 256 (flash_config_sm90.hpp sizes the steps). The schedule and element
// steps are flash_tile.hpp's, as the SM80 backward's: delta first (the same
// kernel), then dK / dV per key block over the group's query heads and their q
// blocks in order, then dQ per q block over its key tiles in order; no atomics,
// every output summed by one block in a fixed order.
//
// Both kernels are three warpgroups, as the forward (flash_fwd_sm90.cu): the first
// gives its registers away and loads by TMA; two consumer warpgroups of 64 rows
// (keys for dK / dV, query rows for dQ) run the products on wgmma:
//  - dK / dV: K and V once; per step (query head, q block of 64 rows) Q, dO and
//    the rows' lse (base 2) and delta into a stage (TMA, and the producer warp's
//    lanes for the two vectors); S^T = K Q^T and dP^T = V dO^T from shared memory,
//    p^T = backward_weight (0 where masked), ds^T = score_grad, both rounded to the
//    storage type, then dV += p^T dO and dK += ds^T Q from registers against
//    dO^T, Q^T (MN-major views) for the block's column part (grid z; two at D =
//    256, each recomputing S^T and dP^T); finally dK * scale, both stored from
//    registers;
//  - dQ: Q and dO once; per key tile of kv_tile_range K and V into a stage;
//    S = Q K^T and dP = dO V^T, the same p and ds, dQ += ds K (K^T an MN-major
//    view); finally dQ * scale.
// Rows that TMA reads past a document are its neighbour's tokens (or zeros),
// weighted 0 by the row's key interval and never stored.
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

namespace attn_oracle::gpu::flash {
namespace {

template <class T, int D, class Smem>
using TmaStaged = TmaTile<T, D, decltype(take<0, 2>(Smem{}))>;  // one stage of a staged layout

template <class Cfg>
struct BwdSm90Params {
  AttentionBwdParams p;
  const int64_t* blocks;  // the grid's tile prefix (BackwardGrid)
  TmaTile<typename Cfg::Element, Cfg::kDim, typename Cfg::SmemOnce> tma_a, tma_b;       // loaded once
  TmaStaged<typename Cfg::Element, Cfg::kDim, typename Cfg::SmemStaged> tma_c, tma_d;  // per step
};

// The consumers' (rows, cols) views of a product's accumulator and coordinates.
template <class Thr, int kM, int kN>
__device__ auto coords_rowcol(const Thr& thr) {
  Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kN>>{}));
  return make_tensor(c.data(), rowcol_gmma(c.layout()));
}
template <class Acc>
__device__ auto as_rowcol(Acc& acc) {
  return make_tensor(acc.data(), rowcol_gmma(acc.layout()));
}

// ---------------------------------------------------------------- dK / dV

template <class T, int D>
struct DkdvKernel : DkdvSm90Config<T, D> {
  using Cfg = DkdvSm90Config<T, D>;
  using SmemOnce = typename Cfg::SmemKV;
  using SmemStaged = typename Cfg::SmemQ;
  using Shared = SharedDkdvSm90<Cfg>;
};

// The steps of a key block: (query head of the group, q block), heads outer.
struct DkdvSteps {
  int per_head, count, g, group;
  int64_t q_begin;
  __device__ int head(int s) const { return g * group + s / per_head; }
  __device__ int64_t a0(int s, int block_m) const { return (q_begin + s % per_head) * block_m; }
};

template <class K>
__device__ void produce_dkdv(const BwdSm90Params<K>& params, typename K::Shared& sh, const BlockTile<K::kDim>& tile,
                             const DkdvSteps& steps, int lane) {
  constexpr int BN = K::kBlockN, BM = K::kBlockM, D = K::kDim, S = K::kStages;
  const AttentionBwdParams& p = params.p;
  if (lane == 0) {
    Tensor sK = make_tensor(make_smem_ptr(sh.k), typename K::SmemKV{});
    Tensor sV = make_tensor(make_smem_ptr(sh.v), typename K::SmemKV{});
    auto [tKg, tKs] = tma_partition(params.tma_a, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                    group_modes<0, 2>(tma_rows<BN, D>(params.tma_a, p.total_kv, p.heads_kv,
                                                                      tile.span.kv0 + tile.first, steps.g)));
    auto [tVg, tVs] = tma_partition(params.tma_b, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                    group_modes<0, 2>(tma_rows<BN, D>(params.tma_b, p.total_kv, p.heads_kv,
                                                                      tile.span.kv0 + tile.first, steps.g)));
    FullBarrier::arrive_and_expect_tx(&sh.kv_full, 2 * K::kKVBytes);
    copy(params.tma_a.with(sh.kv_full), tKg, tKs);
    copy(params.tma_b.with(sh.kv_full), tVg, tVs);
  }
  Tensor sQ = make_tensor(make_smem_ptr(sh.q), typename K::SmemQ{});
  Tensor sDO = make_tensor(make_smem_ptr(sh.d_o), typename K::SmemQ{});
  for (int s = 0; s < steps.count; ++s) {
    const int stage = s % S, h = steps.head(s);
    const int64_t a0 = steps.a0(s, BM);
    if (s >= S) EmptyBarrier::wait(&sh.q_empty[stage], ((s / S) & 1) ^ 1);  // step s - S released it
    for (int r = lane; r < BM; r += 32) {  // the rows' lse (base 2) and delta; 0, 0 past the document
      const RowStats rs = row_stats(p, tile.span, h, a0 + r);
      sh.lse_log2[stage][r] = rs.lse_log2;
      sh.delta[stage][r] = rs.delta;
    }
    // Each lane arrives past its own writes (an arrival releases them); lane 0's
    // arrival carries the TMA bytes too.
    if (lane == 0) {
      const int64_t row = tile.span.q0 + a0;
      auto [tQg, tQs] = tma_partition(params.tma_c, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(tma_rows<BM, D>(params.tma_c, p.total_q, p.heads_q, row, h)));
      auto [tDg, tDs] = tma_partition(params.tma_d, _0{}, Layout<_1>{}, group_modes<0, 2>(sDO),
                                      group_modes<0, 2>(tma_rows<BM, D>(params.tma_d, p.total_q, p.heads_q, row, h)));
      FullBarrier::arrive_and_expect_tx(&sh.q_full[stage], 2 * K::kQStageBytes);
      copy(params.tma_c.with(sh.q_full[stage]), tQg, tQs(_, stage));
      copy(params.tma_d.with(sh.q_full[stage]), tDg, tDs(_, stage));
    } else {
      EmptyBarrier::arrive(&sh.q_full[stage]);
    }
  }
}

template <class K>
__device__ void consume_dkdv(const AttentionBwdParams& p, typename K::Shared& sh, const BlockTile<K::kDim>& tile,
                             const DkdvSteps& steps, int part, int ct) {
  using T = typename K::Element;
  constexpr int BN = K::kBlockN, BM = K::kBlockM, DP = K::kDimPart, S = K::kStages;
  typename K::MmaS mma_s;
  typename K::MmaG mma_g;
  auto thr_s = mma_s.get_thread_slice(ct);
  auto thr_g = mma_g.get_thread_slice(ct);
  Tensor tK = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(sh.k), typename K::SmemKV{}));
  Tensor tV = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(sh.v), typename K::SmemKV{}));
  Tensor tQ = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(sh.q), typename K::SmemQ{}));     // (.., stage)
  Tensor tDO = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(sh.d_o), typename K::SmemQ{}));  // (.., stage)
  const int part_offset = typename K::SmemQ{}(0, part * DP, 0);  // whole swizzle atoms (ColumnPart)
  Tensor tQt = thr_g.partition_fragment_B(make_tensor(make_smem_ptr(sh.q + part_offset), typename K::SmemQtPart{}));
  Tensor tDOt = thr_g.partition_fragment_B(make_tensor(make_smem_ptr(sh.d_o + part_offset), typename K::SmemQtPart{}));
  Tensor acc_dk = partition_fragment_C(mma_g, Shape<Int<BN>, Int<DP>>{});
  Tensor acc_dv = partition_fragment_C(mma_g, Shape<Int<BN>, Int<DP>>{});
  clear(acc_dk);
  clear(acc_dv);
  const auto cs = coords_rowcol<decltype(thr_s), BN, BM>(thr_s);
  const float scale_log2 = p.scale * kLog2e;
  const int64_t b0 = tile.first;

  FullBarrier::wait(&sh.kv_full, 0);
  for (int s = 0; s < steps.count; ++s) {
    const int stage = s % S;
    const int64_t a0 = steps.a0(s, BM);
    FullBarrier::wait(&sh.q_full[stage], (s / S) & 1);
    Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<BN>, Int<BM>>{});
    Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<BN>, Int<BM>>{});
    wgmma_batch<true, false>(mma_s, tK, tQ(_, _, _, stage), acc_s);
    wgmma_batch<true, false>(mma_s, tV, tDO(_, _, _, stage), acc_dp);
    warpgroup_wait<0>();
    auto st = as_rowcol(acc_s);
    auto dpt = as_rowcol(acc_dp);
    const float* lse = sh.lse_log2[stage];  // base 2 already (row_stats)
    const float* delta = sh.delta[stage];
    auto lse_log2 = [&](int c) { return lse[c]; };
    if (tile_fully_allowed(p.mask, p.window_left, p.window_right, a0, a0 + BM, b0, b0 + BN, tile.span.lq,
                           tile.span.lkv))
      probabilities_t<false, BN>(st, cs, lse_log2, p, tile.span, a0, b0, scale_log2);
    else
      probabilities_t<true, BN>(st, cs, lse_log2, p, tile.span, a0, b0, scale_log2);
    score_grads_t(st, dpt, cs, delta);
    Tensor p_t = rounded<T>(acc_s);
    Tensor ds_t = rounded<T>(acc_dp);
    Tensor rP = make_tensor(p_t.data(), acc_as_a_gmma(p_t.layout()));
    Tensor rDS = make_tensor(ds_t.data(), acc_as_a_gmma(ds_t.layout()));
    wgmma_batch<false, true>(mma_g, rP, tDOt(_, _, _, stage), acc_dv);
    wgmma_batch<false, true>(mma_g, rDS, tQt(_, _, _, stage), acc_dk);
    warpgroup_wait<0>();
    EmptyBarrier::arrive(&sh.q_empty[stage]);
  }
  const auto cg = coords_rowcol<decltype(thr_g), BN, DP>(thr_g);
  const int64_t out = tile.kv_offset(tile.first, steps.g) + part * DP;
  store_pairs<T>(as_rowcol(acc_dk), cg, static_cast<T*>(p.dk) + out, tile.kv_stride, tile.rows, p.scale);
  store_pairs<T>(as_rowcol(acc_dv), cg, static_cast<T*>(p.dv) + out, tile.kv_stride, tile.rows, 1.0f);
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    dkdv_sm90_kernel(CUTLASS_GRID_CONSTANT const BwdSm90Params<K> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  auto& sh = aligned_shared<typename K::Shared>(smem_raw);
  const AttentionBwdParams& p = params.p;
  const BlockTile<K::kDim> tile = block_tile<TileRows::keys, K::kBlockN, K::kDim>(p, params.blocks, blockIdx.x);
  const TileRange qr = q_tile_range(p.mask, p.window_left, p.window_right, tile.first, tile.first + tile.rows,
                                    tile.span.lq, tile.span.lkv, K::kBlockM);
  const int group = p.heads_q / p.heads_kv, per_head = int(qr.end > qr.begin ? qr.end - qr.begin : 0);
  const DkdvSteps steps{per_head, per_head * group, int(blockIdx.y), group, qr.begin};
  if (threadIdx.x == 0) {
    FullBarrier::init(&sh.kv_full, 1);
    for (int s = 0; s < K::kStages; ++s) {
      FullBarrier::init(&sh.q_full[s], 32);  // the producer warp's lanes, lane 0 with the TMA bytes
      EmptyBarrier::init(&sh.q_empty[s], K::kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<K::kProducerRegs>();
    if (threadIdx.x < 32) produce_dkdv<K>(params, sh, tile, steps, int(threadIdx.x));
  } else {
    cutlass::arch::warpgroup_reg_alloc<K::kConsumerRegs>();
    consume_dkdv<K>(p, sh, tile, steps, int(blockIdx.z), int(threadIdx.x) - 128);
  }
#endif
}

// ---------------------------------------------------------------- dQ

template <class T, int D>
struct DqKernel : DqSm90Config<T, D> {
  using Cfg = DqSm90Config<T, D>;
  using SmemOnce = typename Cfg::SmemQ;
  using SmemStaged = typename Cfg::SmemKV;
  using Shared = SharedDqSm90<Cfg>;
};

template <class K>
__device__ void produce_dq(const BwdSm90Params<K>& params, typename K::Shared& sh, const BlockTile<K::kDim>& tile,
                           int h, int g, const TileRange& kv) {
  constexpr int BM = K::kBlockM, BN = K::kBlockN, D = K::kDim, S = K::kStages;
  const AttentionBwdParams& p = params.p;
  const int64_t row = tile.span.q0 + tile.first;
  Tensor sQ = make_tensor(make_smem_ptr(sh.q), typename K::SmemQ{});
  Tensor sDO = make_tensor(make_smem_ptr(sh.d_o), typename K::SmemQ{});
  auto [tQg, tQs] = tma_partition(params.tma_a, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                  group_modes<0, 2>(tma_rows<BM, D>(params.tma_a, p.total_q, p.heads_q, row, h)));
  auto [tDg, tDs] = tma_partition(params.tma_b, _0{}, Layout<_1>{}, group_modes<0, 2>(sDO),
                                  group_modes<0, 2>(tma_rows<BM, D>(params.tma_b, p.total_q, p.heads_q, row, h)));
  FullBarrier::arrive_and_expect_tx(&sh.q_full, 2 * K::kQBytes);
  copy(params.tma_a.with(sh.q_full), tQg, tQs);
  copy(params.tma_b.with(sh.q_full), tDg, tDs);

  produce_key_tiles<typename K::SmemKV, BN, D, S>(params.tma_c, params.tma_d, p, tile.span, g, kv, sh.k, sh.v,
                                                  sh.k_full, sh.v_full, sh.kv_empty, K::kKVStageBytes);
}

template <class K>
__device__ void consume_dq(const AttentionBwdParams& p, typename K::Shared& sh, const BlockTile<K::kDim>& tile, int h,
                           const TileRange& kv, int ct) {
  using T = typename K::Element;
  constexpr int BM = K::kBlockM, BN = K::kBlockN, D = K::kDim, S = K::kStages;
  typename K::MmaS mma_s;
  typename K::MmaG mma_g;
  auto thr_s = mma_s.get_thread_slice(ct);
  auto thr_g = mma_g.get_thread_slice(ct);
  Tensor tQ = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(sh.q), typename K::SmemQ{}));
  Tensor tDO = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(sh.d_o), typename K::SmemQ{}));
  Tensor tK = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(sh.k), typename K::SmemKV{}));  // (.., stage)
  Tensor tV = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(sh.v), typename K::SmemKV{}));
  Tensor tKt = thr_g.partition_fragment_B(make_tensor(make_smem_ptr(sh.k), typename K::SmemKt{}));
  Tensor acc_dq = partition_fragment_C(mma_g, Shape<Int<BM>, Int<D>>{});
  clear(acc_dq);
  const auto cs = coords_rowcol<decltype(thr_s), BM, BN>(thr_s);
  constexpr int kRows = decltype(size<0>(cs))::value;
  RowStats rows[kRows];
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) rows[i] = row_stats(p, tile.span, h, tile.first + get<0>(cs(i, 0)));
  const float scale_log2 = p.scale * kLog2e;
  const int tiles = int(kv.end - kv.begin);

  FullBarrier::wait(&sh.q_full, 0);
  for (int i = 0; i < tiles; ++i) {
    const int stage = i % S;
    const int64_t b0 = (kv.begin + i) * BN;
    Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<BM>, Int<BN>>{});
    Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<BM>, Int<BN>>{});
    FullBarrier::wait(&sh.k_full[stage], (i / S) & 1);
    wgmma_batch<true, false>(mma_s, tQ, tK(_, _, _, stage), acc_s);
    FullBarrier::wait(&sh.v_full[stage], (i / S) & 1);
    wgmma_batch<true, false>(mma_s, tDO, tV(_, _, _, stage), acc_dp);
    warpgroup_wait<0>();
    auto s_rc = as_rowcol(acc_s);
    auto dp_rc = as_rowcol(acc_dp);
    if (tile_fully_allowed(p.mask, p.window_left, p.window_right, tile.first, tile.first + tile.rows, b0, b0 + BN,
                           tile.span.lq, tile.span.lkv))
      probabilities<false, BN>(s_rc, cs, rows, p, tile.span, tile.first, b0, scale_log2);
    else
      probabilities<true, BN>(s_rc, cs, rows, p, tile.span, tile.first, b0, scale_log2);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int j = 0; j < size<1>(dp_rc); ++j) dp_rc(r, j) = score_grad(s_rc(r, j), dp_rc(r, j), rows[r].delta);
    }
    Tensor ds = rounded<T>(acc_dp);
    Tensor rDS = make_tensor(ds.data(), acc_as_a_gmma(ds.layout()));
    wgmma_batch<false, true>(mma_g, rDS, tKt(_, _, _, stage), acc_dq);
    warpgroup_wait<0>();
    EmptyBarrier::arrive(&sh.kv_empty[stage]);
  }
  const auto cg = coords_rowcol<decltype(thr_g), BM, D>(thr_g);
  store_pairs<T>(as_rowcol(acc_dq), cg, static_cast<T*>(p.dq) + tile.q_offset(tile.first, h), tile.q_stride,
                 tile.rows, p.scale);
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    dq_sm90_kernel(CUTLASS_GRID_CONSTANT const BwdSm90Params<K> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  auto& sh = aligned_shared<typename K::Shared>(smem_raw);
  const AttentionBwdParams& p = params.p;
  const BlockTile<K::kDim> tile =
      block_tile<TileRows::queries, K::kBlockM, K::kDim>(p, params.blocks, int64_t(gridDim.x) - 1 - blockIdx.x);
  const int h = blockIdx.y, g = kv_head_of(h, p.heads_q, p.heads_kv);
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, tile.first, tile.first + tile.rows,
                                     tile.span.lq, tile.span.lkv, K::kBlockN);
  init_query_block_barriers<K::kStages, K::kConsumerThreads>(sh);
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x == 0) produce_dq<K>(params, sh, tile, h, g, kv);
  } else {
    cutlass::arch::warpgroup_reg_alloc<240>();
    consume_dq<K>(p, sh, tile, h, kv, int(threadIdx.x) - 128);
  }
#endif
}

// A [tokens, heads, D] tensor a kernel loads by TMA.
struct TmaSource {
  const void* data;
  int64_t tokens;
  int heads;
};

// Kernel K over `blocks` x `heads` x K::kParts; a and b are loaded once (SmemOnce
// tiles), c and d per step (one stage of SmemStaged).
template <class K, class Kernel>
bool launch_sm90(Kernel kernel, const char* name, const AttentionBwdParams& p, const int64_t* prefix, int64_t blocks,
                 int heads, const TmaSource& a, const TmaSource& b, const TmaSource& c, const TmaSource& d,
                 std::string& failure) {
  using T = typename K::Element;
  constexpr int D = K::kDim;
  auto once = [](const TmaSource& x) { return make_tma_tile<T, D>(x.data, x.tokens, x.heads, typename K::SmemOnce{}); };
  auto staged = [](const TmaSource& x) {
    return make_tma_tile<T, D>(x.data, x.tokens, x.heads, take<0, 2>(typename K::SmemStaged{}));
  };
  const BwdSm90Params<K> params{p, prefix, once(a), once(b), staged(c), staged(d)};
  return launch_tiles<Sm90Launch<K, typename K::Shared>>(kernel, name, blocks, "blocks", heads, K::kParts, failure,
                                                         params);
}

#ifdef ATTN_FLASH_DEV_DIM
using Sm90BackwardHeadDims = HeadDims<ATTN_FLASH_DEV_DIM>;
#else
using Sm90BackwardHeadDims = HeadDims<64, 128, 256>;
#endif

}  // namespace

bool backward_sm90_fits(const AttentionFwdParams& p) {
  return forward_sm90_fits(p) && Sm90BackwardHeadDims::contains(p.head_dim);
}

bool backward_sm90(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure) {
  if (!backward_sm90_fits(p)) {
    failure = "flash backward (sm_90a): head_dim " + std::to_string(p.head_dim) + ", " + std::to_string(p.total_q) +
              " query and " + std::to_string(p.total_kv) + " key tokens are outside what it runs";
    return false;
  }
  if (!backward_delta(p, failure)) return false;
  const TmaSource q{p.q, p.total_q, p.heads_q}, d_o{p.d_o, p.total_q, p.heads_q};
  const TmaSource k{p.k, p.total_kv, p.heads_kv}, v{p.v, p.total_kv, p.heads_kv};
  return switch_dtype_head_dim(FlashDtypes{}, Sm90BackwardHeadDims{}, p.dtype, p.head_dim, [&](auto instance) {
    using I = decltype(instance);
    using Kd = DkdvKernel<typename I::Element, I::kDim>;
    using Kq = DqKernel<typename I::Element, I::kDim>;
    return launch_sm90<Kd>(dkdv_sm90_kernel<Kd>, "flash backward dK/dV (sm_90a)", p, grid.kv_block_prefix,
                           grid.kv_blocks, p.heads_kv, k, v, q, d_o, failure) &&
           launch_sm90<Kq>(dq_sm90_kernel<Kq>, "flash backward dQ (sm_90a)", p, grid.q_block_prefix, grid.q_blocks,
                           p.heads_q, q, d_o, k, v, failure);
  }, [&] {
    failure = "flash backward (sm_90a): no kernel for dtype " + std::to_string(p.dtype);
    return false;
  });
}

}  // namespace attn_oracle::gpu::flash
