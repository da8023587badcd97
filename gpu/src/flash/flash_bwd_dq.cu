// flash_bwd_dq.cu: the preprocessing and dQ kernels of the tensor-core attention
// backward of the `cuda` backend (CuTe, SM80 MMA, built for sm_90), and the
// backward's entry point; the schedule and element steps are flash_tile.hpp's.
//
// delta: 8 threads per (token, query head) row, 16-byte loads of O and dO, each
//   lane's chunks summed in order, then a butterfly of shuffles (flash_delta).
// dQ: one block of kWarps warps per (document, query head, q block of kBlockM
//   rows): Q and dO in shared memory once, the rows' lse and delta in registers; the
//   K and V tiles of kv_tile_range in two shared-memory stages (the next one's copy
//   in flight); S = Q K^T -> p (backward_weight, masked outside tile_fully_allowed
//   tiles), dP = dO V^T -> ds = p (dP - delta) (score_grad), ds rounded to the
//   storage type and used in registers as the A operand of dQ += ds K (K^T by
//   ldmatrix.trans); finally dQ * scale through shared memory (Q's) to 16-byte
//   stores. No atomics: a q block's dQ is this block's alone, summed in key order.
// Grid: x = the flattened (document, q block) index, last first (the longest rows
// of a causal document start first), y = query head.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "flash/flash_config.hpp"
#include "flash/flash_device.cuh"
#include "flash/flash_launch.hpp"

namespace attn_oracle::gpu::flash {
namespace {

constexpr int kDeltaThreads = 256;

template <class T>
__global__ void __launch_bounds__(kDeltaThreads) delta_kernel(AttentionBwdParams p) {
  static_assert(kDeltaChunk * sizeof(T) == sizeof(uint4), "one 16-byte load a chunk");
  const int64_t rows = p.total_q * p.heads_q;
  const int64_t row = (int64_t(blockIdx.x) * kDeltaThreads + threadIdx.x) / kDeltaLanes;
  const int lane = int(threadIdx.x) % kDeltaLanes;
  float acc = 0.0f;
  if (row < rows) {  // row = token * heads_q + head: its D values are contiguous
    const T* o = reinterpret_cast<const T*>(p.o_in) + row * p.head_dim;
    const T* d_o = reinterpret_cast<const T*>(p.d_o) + row * p.head_dim;
    for (int c = lane * kDeltaChunk; c < p.head_dim; c += kDeltaLanes * kDeltaChunk) {
      const uint4 vo = __ldg(reinterpret_cast<const uint4*>(o + c));
      const uint4 vd = __ldg(reinterpret_cast<const uint4*>(d_o + c));
      const T* eo = reinterpret_cast<const T*>(&vo);
      const T* ed = reinterpret_cast<const T*>(&vd);
      CUTE_UNROLL
      for (int e = 0; e < kDeltaChunk; ++e) acc += float(ed[e]) * float(eo[e]);
    }
  }
  acc += __shfl_xor_sync(0xffffffff, acc, 4);
  acc += __shfl_xor_sync(0xffffffff, acc, 2);
  acc += __shfl_xor_sync(0xffffffff, acc, 1);
  if (row < rows && lane == 0) p.delta[(row % p.heads_q) * p.total_q + row / p.heads_q] = acc;
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) dq_kernel(AttentionBwdParams p, const int64_t* q_blocks) {
  using T = typename Cfg::Element;
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  extern __shared__ __align__(128) unsigned char smem[];
  const int thread = threadIdx.x;
  const BlockTile<D> tile = block_tile<TileRows::queries, BM, D>(p, q_blocks, int64_t(gridDim.x) - 1 - blockIdx.x);
  const DocSpan& span = tile.span;
  const int64_t a0 = tile.first;
  const int rows = tile.rows, h = blockIdx.y, g = kv_head_of(h, p.heads_q, p.heads_kv);
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, span.lq, span.lkv, BN);
  const int64_t q_offset = tile.q_offset(a0, h);
  auto q_shape = Shape<Int<BM>, Int<D>>{};
  Tensor gQ = global_tile<T, BM, D>(p.q, q_offset, tile.q_stride);
  Tensor gDO = global_tile<T, BM, D>(p.d_o, q_offset, tile.q_stride);

  // Shared memory: Q, dO; then the K/V stages (kv_stage_loader).
  constexpr int kQ = cosize(typename Cfg::SmemQ{}), kKV = cosize(typename Cfg::SmemKV{});
  T* smem_q = reinterpret_cast<T*>(smem);
  T* smem_kv = smem_q + 2 * kQ;
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Cfg::SmemQ{});
  Tensor sDO = make_tensor(make_smem_ptr(smem_q + kQ), typename Cfg::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem_kv), typename Cfg::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem_kv + kKV), typename Cfg::SmemKV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem_kv), typename Cfg::SmemKt{});

  typename Cfg::GmemLoad load;
  auto load_thr = load.get_slice(thread);
  Tensor cQ = load_thr.partition_S(make_identity_tensor(q_shape));
  auto load_kv = kv_stage_loader<Cfg>(load, load_thr, p, tile, g, smem_kv);

  typename Cfg::Mma mma;
  auto thr_mma = mma.get_slice(thread);
  Tensor acc_dq = partition_fragment_C(mma, q_shape);
  clear(acc_dq);
  Tensor cS = thr_mma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  Tensor rowcol_cs = make_tensor(cS.data(), rowcol(cS.layout()));
  // Register fragments shaped by the MMA; only their shapes are taken from these views.
  Tensor rQ = thr_mma.partition_fragment_A(sQ);
  Tensor rDO = thr_mma.partition_fragment_A(sDO);
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rV = thr_mma.partition_fragment_B(sV);
  Tensor rKt = thr_mma.partition_fragment_B(make_tensor(make_smem_ptr(smem_kv), Shape<Int<D>, Int<BN>>{}));
  auto copy_a = make_tiled_copy_A(typename Cfg::LoadA{}, mma);
  auto copy_b = make_tiled_copy_B(typename Cfg::LoadB{}, mma);
  auto copy_bt = make_tiled_copy_B(typename Cfg::LoadBt{}, mma);
  Tensor sQ_a = copy_a.get_slice(thread).partition_S(sQ);
  Tensor sDO_a = copy_a.get_slice(thread).partition_S(sDO);
  Tensor sK_b = copy_b.get_slice(thread).partition_S(sK);
  Tensor sV_b = copy_b.get_slice(thread).partition_S(sV);
  Tensor sKt_b = copy_bt.get_slice(thread).partition_S(sKt);

  constexpr int kRows = decltype(size<0>(rowcol(acc_dq.layout())))::value;
  RowStats stats[kRows];
  CUTE_UNROLL
  for (int i = 0; i < kRows; ++i) stats[i] = row_stats(p, span, h, a0 + get<0>(rowcol_cs(i, 0)));
  const float scale_log2 = p.scale * kLog2e;

  load_rows(load, load_thr.partition_S(gQ), load_thr.partition_D(sQ), cQ, rows);
  load_rows(load, load_thr.partition_S(gDO), load_thr.partition_D(sDO), cQ, rows);
  if (kv.begin < kv.end) load_kv(kv.begin, 0);
  cp_async_fence();
  for (int64_t n = kv.begin; n < kv.end; ++n) {
    const int stage = int((n - kv.begin) & 1);
    cp_async_wait<0>();
    __syncthreads();  // this stage landed for every thread; the other one is free
    if (n + 1 < kv.end) load_kv(n + 1, stage ^ 1);
    cp_async_fence();
    const int offset = stage * 2 * kKV;
    const int64_t b0 = n * BN;

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
    clear(acc_s);
    gemm_ss(mma, acc_s, rQ, sQ_a, copy_a, rK, shifted(sK_b, offset), copy_b, thread);
    Tensor s = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    // a0 + BM: a block's rows past the document take the mask (row_stats' 0, 0 are not an lse)
    if (tile_fully_allowed(p.mask, p.window_left, p.window_right, a0, a0 + BM, b0, b0 + BN, span.lq, span.lkv))
      probabilities<false, BN>(s, rowcol_cs, stats, p, span, a0, b0, scale_log2);
    else
      probabilities<true, BN>(s, rowcol_cs, stats, p, span, a0, b0, scale_log2);

    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
    clear(acc_dp);
    gemm_ss(mma, acc_dp, rDO, sDO_a, copy_a, rV, shifted(sV_b, offset), copy_b, thread);
    Tensor dp = make_tensor(acc_dp.data(), rowcol(acc_dp.layout()));
    Tensor ds = make_tensor_like<T>(acc_dp);
    Tensor ds_rc = make_tensor(ds.data(), rowcol(ds.layout()));
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      CUTE_UNROLL
      for (int j = 0; j < size<1>(dp); ++j) ds_rc(i, j) = T(score_grad(s(i, j), dp(i, j), stats[i].delta));
    }
    gemm_rs(mma, acc_dq, make_tensor(ds.data(), acc_as_a(ds.layout())), rKt, shifted(sKt_b, offset), copy_bt, thread);
  }

  CUTE_UNROLL
  for (int i = 0; i < size(acc_dq); ++i) acc_dq(i) *= p.scale;
  cp_async_wait<0>();  // with no kv tile, Q's copy may still be landing where dQ goes
  __syncthreads();     // and every warp is past Q
  Tensor gDQ = global_tile<T, BM, D>(p.dq, q_offset, tile.q_stride);
  store_accumulator<Cfg>(mma, acc_dq, sQ, gDQ, rows, thread);
}

template <class T>
bool launch_delta(const AttentionBwdParams& p, std::string& failure) {
  const int64_t threads = p.total_q * p.heads_q * kDeltaLanes;
  if (threads == 0) return true;
  const int64_t blocks = (threads + kDeltaThreads - 1) / kDeltaThreads;
  if (blocks > INT_MAX) {
    failure = "flash backward delta: " + std::to_string(blocks) + " blocks exceed CUDA's grid limits";
    return false;
  }
  return launch_kernel(delta_kernel<T>, dim3(unsigned(blocks)), kDeltaThreads, 0, "flash backward delta", failure, p);
}

}  // namespace

int backward_q_block(int head_dim) { return flash_dq_tile(head_dim).block_m; }

bool backward_delta(const AttentionBwdParams& p, std::string& failure) {
  return switch_flash_instance(p.dtype, p.head_dim, "flash backward delta", failure, [&](auto instance) {
    return launch_delta<typename decltype(instance)::Element>(p, failure);
  });
}

bool backward(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure) {
  return switch_flash_instance(p.dtype, p.head_dim, "flash backward", failure, [&](auto instance) {
    using I = decltype(instance);
    using Cfg = DqConfig<typename I::Element, I::kDim>;
    return launch_delta<typename I::Element>(p, failure) && backward_dkdv(p, grid, failure) &&
           launch_tiles<Cfg>(dq_kernel<Cfg>, "flash backward dQ", grid.q_blocks, "blocks", p.heads_q, 1, failure, p,
                             grid.q_block_prefix);
  });
}

}  // namespace attn_oracle::gpu::flash
