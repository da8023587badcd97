// flash_bwd_dkdv.cu: dK and dV of the tensor-core attention backward of the
// `cuda` backend (CuTe, SM80 MMA, built for sm_90), fp16 / bf16, head dims
// 64 / 128 / 256; the schedule and element steps are flash_tile.hpp's.
//
// One block of kWarps warps per (document, kv head, key block of kBlockN keys,
// column part of dK / dV): K and V in shared memory once (cp.async); for each query
// head of the group and each q block of q_tile_range, Q and dO of kBlockM rows in
// two shared-memory stages (the next step's copy in flight while this one is
// used), the rows' lse and delta beside them;
//   S^T = K Q^T -> p^T (backward_weight, masked outside tile_fully_allowed tiles),
//   dP^T = V dO^T -> ds^T = p^T (dP^T - delta) (score_grad),
//   dV += p^T dO and dK += ds^T Q with p^T, ds^T rounded to the storage type and
//   used in registers as the A operands (acc_as_a), dO^T and Q^T read by
//   ldmatrix.trans;
// finally dK * scale; dK and dV through shared memory (K's and V's) to 16-byte
// stores. Every output element is summed by this one block in a fixed order: the
// backward is deterministic. Keys past the document are zero-filled and never stored.
// Grid: x = the flattened (document, key block) index, y = kv head, z = column part.
#include <cuda_runtime.h>

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

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) dkdv_kernel(AttentionBwdParams p, const int64_t* kv_blocks) {
  using T = typename Cfg::Element;
  constexpr int BN = Cfg::kBlockN, BM = Cfg::kBlockM, D = Cfg::kDim, DP = Cfg::kDimPart;
  extern __shared__ __align__(128) unsigned char smem[];
  const int thread = threadIdx.x;
  const BlockTile<D> tile = block_tile<TileRows::keys, BN, D>(p, kv_blocks, blockIdx.x);
  const DocSpan& span = tile.span;
  const int64_t b0 = tile.first;
  const int keys = tile.rows, g = blockIdx.y, part = blockIdx.z, group = p.heads_q / p.heads_kv;
  const TileRange qr = q_tile_range(p.mask, p.window_left, p.window_right, b0, b0 + keys, span.lq, span.lkv, BM);
  // Steps (query head of the group, q block), heads outer; 32-bit counters (a document
  // of 2^31 q blocks would not fit a device) leave registers to the accumulators.
  const int per_head = int(qr.end > qr.begin ? qr.end - qr.begin : 0), steps = per_head * group;
  auto head_of = [&](int s) { return g * group + s / per_head; };
  auto a0_of = [&](int s) { return (qr.begin + s % per_head) * BM; };

  // Global tiles; Q / dO of a step move from head 0's first row.
  const int64_t kv_offset = tile.kv_offset(b0, g);
  Tensor gK = global_tile<T, BN, D>(p.k, kv_offset, tile.kv_stride);
  Tensor gV = global_tile<T, BN, D>(p.v, kv_offset, tile.kv_stride);
  Tensor gQ0 = global_tile<T, BM, D>(p.q, tile.q_offset(0, 0), tile.q_stride);
  Tensor gDO0 = global_tile<T, BM, D>(p.d_o, tile.q_offset(0, 0), tile.q_stride);
  auto kv_shape = Shape<Int<BN>, Int<D>>{};
  auto q_shape = Shape<Int<BM>, Int<D>>{};

  // Shared memory: K, V; stage s of Q at smem_q + 2 s kQ and dO kQ after it; then
  // lse of stages 0, 1 and delta of stages 0, 1.
  constexpr int kKV = cosize(typename Cfg::SmemKV{}), kQ = cosize(typename Cfg::SmemQ{});
  T* smem_k = reinterpret_cast<T*>(smem);
  T* smem_v = smem_k + kKV;
  T* smem_q = smem_v + kKV;
  float* smem_lse = reinterpret_cast<float*>(smem_q + 4 * kQ);
  float* smem_delta = smem_lse + 2 * BM;
  Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Cfg::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Cfg::SmemKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Cfg::SmemQ{});
  Tensor sDO = make_tensor(make_smem_ptr(smem_q + kQ), typename Cfg::SmemQ{});
  const int part_offset = column_part_offset<BM, D, DP>(part);
  Tensor sQt = make_tensor(make_smem_ptr(smem_q + part_offset), typename Cfg::SmemQPartT{});
  Tensor sDOt = make_tensor(make_smem_ptr(smem_q + kQ + part_offset), typename Cfg::SmemQPartT{});

  typename Cfg::GmemLoad load;
  auto load_thr = load.get_slice(thread);
  Tensor cKV = load_thr.partition_S(make_identity_tensor(kv_shape));
  Tensor cQ = load_thr.partition_S(make_identity_tensor(q_shape));
  Tensor load_gQ = load_thr.partition_S(gQ0);
  Tensor load_gDO = load_thr.partition_S(gDO0);
  Tensor load_sQ = load_thr.partition_D(sQ);
  Tensor load_sDO = load_thr.partition_D(sDO);
  auto load_step = [&](int s, int stage) {
    const int64_t a0 = a0_of(s);
    const int rows = int(span.lq - a0 < BM ? span.lq - a0 : BM);
    const int64_t from = a0 * tile.q_stride + int64_t(head_of(s)) * D;
    const int to = stage * 2 * kQ;
    load_rows(load, shifted(load_gQ, from), shifted(load_sQ, to), cQ, rows);
    load_rows(load, shifted(load_gDO, from), shifted(load_sDO, to), cQ, rows);
    if (thread < BM) {  // the rows' lse and delta, by cp.async too; a row past the document attends nothing
      float* lse_to = smem_lse + stage * BM + thread;
      float* delta_to = smem_delta + stage * BM + thread;
      if (thread < rows) {
        const int64_t i = int64_t(head_of(s)) * p.total_q + span.q0 + a0 + thread;
        SM80_CP_ASYNC_CACHEALWAYS<float>::copy(p.lse_in[i], *lse_to);
        SM80_CP_ASYNC_CACHEALWAYS<float>::copy(p.delta[i], *delta_to);
      } else {
        *lse_to = -INFINITY, *delta_to = 0.0f;
      }
    }
  };

  typename Cfg::Mma mma;
  auto thr_mma = mma.get_slice(thread);
  Tensor acc_dk = partition_fragment_C(mma, Shape<Int<BN>, Int<DP>>{});
  Tensor acc_dv = partition_fragment_C(mma, Shape<Int<BN>, Int<DP>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor cS = thr_mma.partition_C(make_identity_tensor(Shape<Int<BN>, Int<BM>>{}));
  Tensor rowcol_cs = make_tensor(cS.data(), rowcol(cS.layout()));
  // Register fragments shaped by the MMA; only their shapes are taken from these views.
  Tensor rK = thr_mma.partition_fragment_A(sK);
  Tensor rV = thr_mma.partition_fragment_A(sV);
  Tensor rQ = thr_mma.partition_fragment_B(sQ);
  Tensor rDO = thr_mma.partition_fragment_B(sDO);
  Tensor rQt = thr_mma.partition_fragment_B(make_tensor(make_smem_ptr(smem_q), Shape<Int<DP>, Int<BM>>{}));
  Tensor rDOt = thr_mma.partition_fragment_B(make_tensor(make_smem_ptr(smem_q), Shape<Int<DP>, Int<BM>>{}));
  auto copy_a = make_tiled_copy_A(typename Cfg::LoadA{}, mma);
  auto copy_b = make_tiled_copy_B(typename Cfg::LoadB{}, mma);
  auto copy_bt = make_tiled_copy_B(typename Cfg::LoadBt{}, mma);
  Tensor sK_a = copy_a.get_slice(thread).partition_S(sK);
  Tensor sV_a = copy_a.get_slice(thread).partition_S(sV);
  Tensor sQ_b = copy_b.get_slice(thread).partition_S(sQ);
  Tensor sDO_b = copy_b.get_slice(thread).partition_S(sDO);
  Tensor sQt_b = copy_bt.get_slice(thread).partition_S(sQt);
  Tensor sDOt_b = copy_bt.get_slice(thread).partition_S(sDOt);
  const float scale_log2 = p.scale * kLog2e;

  load_rows(load, load_thr.partition_S(gK), load_thr.partition_D(sK), cKV, keys);
  load_rows(load, load_thr.partition_S(gV), load_thr.partition_D(sV), cKV, keys);
  if (steps > 0) load_step(0, 0);
  cp_async_fence();
  for (int s = 0; s < steps; ++s) {
    const int stage = int(s & 1);
    cp_async_wait<0>();
    __syncthreads();  // this stage (and its lse, delta) landed for every thread; the other one is free
    if (s + 1 < steps) load_step(s + 1, stage ^ 1);
    cp_async_fence();
    const int64_t a0 = a0_of(s);
    const int offset = stage * 2 * kQ;
    const float* lse = smem_lse + stage * BM;
    const float* delta = smem_delta + stage * BM;

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<BN>, Int<BM>>{});
    clear(acc_s);
    gemm_ss(mma, acc_s, rK, sK_a, copy_a, rQ, shifted(sQ_b, offset), copy_b, thread);
    Tensor st = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    auto lse_log2 = [&](int c) { return lse_log2_of(lse[c]); };
    if (tile_fully_allowed(p.mask, p.window_left, p.window_right, a0, a0 + BM, b0, b0 + BN, span.lq, span.lkv))
      probabilities_t<false, BN>(st, rowcol_cs, lse_log2, p, span, a0, b0, scale_log2);
    else
      probabilities_t<true, BN>(st, rowcol_cs, lse_log2, p, span, a0, b0, scale_log2);

    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<BN>, Int<BM>>{});
    clear(acc_dp);
    gemm_ss(mma, acc_dp, rV, sV_a, copy_a, rDO, shifted(sDO_b, offset), copy_b, thread);
    Tensor dpt = make_tensor(acc_dp.data(), rowcol(acc_dp.layout()));
    score_grads_t(st, dpt, rowcol_cs, delta);

    Tensor p_t = make_tensor_like<T>(acc_s);
    Tensor ds_t = make_tensor_like<T>(acc_dp);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) p_t(i) = T(acc_s(i)), ds_t(i) = T(acc_dp(i));  // round to nearest even
    gemm_rs(mma, acc_dv, make_tensor(p_t.data(), acc_as_a(p_t.layout())), rDOt, shifted(sDOt_b, offset), copy_bt,
            thread);
    gemm_rs(mma, acc_dk, make_tensor(ds_t.data(), acc_as_a(ds_t.layout())), rQt, shifted(sQt_b, offset), copy_bt,
            thread);
  }

  CUTE_UNROLL
  for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= p.scale;
  cp_async_wait<0>();
  __syncthreads();  // every warp is past K and V, whose places dK and dV take
  // The block's place again, read anew past the barrier rather than held in
  // registers through the loop (they spilled there: 255 registers in use).
  const BlockTile<D> out = block_tile<TileRows::keys, BN, D>(p, kv_blocks, blockIdx.x);
  const int64_t out_offset = out.kv_offset(out.first, blockIdx.y) + int64_t(blockIdx.z) * DP;
  Tensor gDK = global_tile<T, BN, DP>(p.dk, out_offset, out.kv_stride);
  Tensor gDV = global_tile<T, BN, DP>(p.dv, out_offset, out.kv_stride);
  store_accumulator<Cfg>(mma, acc_dk, make_tensor(make_smem_ptr(smem_k), typename Cfg::SmemOut{}), gDK, out.rows, thread);
  store_accumulator<Cfg>(mma, acc_dv, make_tensor(make_smem_ptr(smem_v), typename Cfg::SmemOut{}), gDV, out.rows, thread);
}

}  // namespace

int backward_kv_block(int head_dim) { return flash_dkdv_tile(head_dim).block_n; }

bool backward_dkdv(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure) {
  return switch_flash_instance(p.dtype, p.head_dim, "flash backward", failure, [&](auto instance) {
    using I = decltype(instance);
    using Cfg = DkdvConfig<typename I::Element, I::kDim>;
    return launch_tiles<Cfg>(dkdv_kernel<Cfg>, "flash backward dK/dV", grid.kv_blocks, "blocks", p.heads_kv,
                             unsigned(Cfg::kSplit), failure, p, grid.kv_block_prefix);
  });
}

}  // namespace attn_oracle::gpu::flash
