// flash_fwd.cu: the tensor-core attention forward of the `cuda` backend
// (CuTe, SM80 MMA, built for sm_90), fp16 / bf16 storage, head dims 64 / 128 / 256.
//
// One block of kWarps warps per (document, query head, q tile of kBlockM rows):
//   Q tile -> shared memory once (cp.async); K and V tiles of kBlockN keys in two
//   shared-memory stages, the next tile's copy in flight while this one is used;
//   S = Q K^T on the tensor cores from ldmatrix fragments, in registers; the row
//   steps of flash_tile.hpp on the registers (a row's values are spread over the 4
//   threads of a quad: max and sum reduce by two shuffles); P converted to the
//   storage type in registers and used directly as the A operand of O += P V
//   (acc_as_a), V^T read by ldmatrix.trans; O / l through shared memory to
//   16-byte stores; lse by the quad's first thread.
// Tiles: kv_tile_range of the q tile, increasing, as the twin; a tile wholly
// allowed (tile_fully_allowed) skips the per-element mask. Rows and keys past the
// document are zero-filled in shared memory and never stored.
// Grid: x = the flattened (document, q tile) index, last first (the longest rows
// of a causal document start first), y = query head.
#include <cuda_runtime.h>

#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "flash/flash_config.hpp"
#include "flash/flash_device.cuh"
#include "flash/flash_launch.hpp"
#include "flash/flash_softmax.cuh"

namespace attn_oracle::gpu::flash {
namespace {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) forward_kernel(AttentionFwdParams p, const int64_t* q_tiles) {
  using T = typename Cfg::Element;
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  extern __shared__ __align__(128) unsigned char smem[];
  const int thread = threadIdx.x;
  const BlockTile<D> tile = block_tile<TileRows::queries, BM, D>(p, q_tiles, int64_t(gridDim.x) - 1 - blockIdx.x);
  const DocSpan& span = tile.span;
  const int64_t a0 = tile.first;
  const int rows = tile.rows, h = blockIdx.y, g = kv_head_of(h, p.heads_q, p.heads_kv);
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, span.lq, span.lkv, BN);
  const int64_t q_offset = tile.q_offset(a0, h);
  auto tile_shape = Shape<Int<BM>, Int<D>>{};
  Tensor gQ = global_tile<T, BM, D>(p.q, q_offset, tile.q_stride);

  // Shared memory: Q, then the K/V stages (kv_stage_loader).
  T* smem_q = reinterpret_cast<T*>(smem);
  T* smem_kv = smem_q + cosize(typename Cfg::SmemQ{});
  constexpr int kKV = cosize(typename Cfg::SmemKV{});
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Cfg::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem_kv), typename Cfg::SmemKV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem_kv + kKV), typename Cfg::SmemVt{});

  typename Cfg::GmemLoad load;
  auto load_thr = load.get_slice(thread);
  Tensor cQ = load_thr.partition_S(make_identity_tensor(tile_shape));
  auto load_kv = kv_stage_loader<Cfg>(load, load_thr, p, tile, g, smem_kv);

  typename Cfg::Mma mma;
  auto thr_mma = mma.get_slice(thread);
  Tensor acc_o = partition_fragment_C(mma, tile_shape);
  clear(acc_o);
  Tensor cS = thr_mma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  Tensor rowcol_cs = make_tensor(cS.data(), rowcol(cS.layout()));
  // Register fragments shaped by the MMA; only their shapes are taken from these views.
  Tensor rQ = thr_mma.partition_fragment_A(sQ);
  Tensor rK = thr_mma.partition_fragment_B(sK);
  Tensor rVt = thr_mma.partition_fragment_B(make_tensor(make_smem_ptr(smem_kv), Shape<Int<D>, Int<BN>>{}));
  auto copy_a = make_tiled_copy_A(typename Cfg::LoadA{}, mma);
  auto copy_b = make_tiled_copy_B(typename Cfg::LoadB{}, mma);
  auto copy_bt = make_tiled_copy_B(typename Cfg::LoadBt{}, mma);
  Tensor sQ_a = copy_a.get_slice(thread).partition_S(sQ);
  Tensor sK_b = copy_b.get_slice(thread).partition_S(sK);
  Tensor sVt_b = copy_bt.get_slice(thread).partition_S(sVt);

  constexpr int kRows = decltype(size<0>(rowcol(acc_o.layout())))::value;
  RowState<kRows> st;
  st.reset();
  const float scale_log2 = p.scale * kLog2e;

  load_rows(load, load_thr.partition_S(gQ), load_thr.partition_D(sQ), cQ, rows);
  if (kv.begin < kv.end) load_kv(kv.begin, 0);
  cp_async_fence();
  for (int64_t n = kv.begin; n < kv.end; ++n) {
    const int stage = int((n - kv.begin) & 1);
    cp_async_wait<0>();
    __syncthreads();  // this stage landed for every thread; the other one is free
    if (n + 1 < kv.end) load_kv(n + 1, stage ^ 1);
    cp_async_fence();

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
    clear(acc_s);
    const int offset = stage * 2 * kKV;
    gemm_ss(mma, acc_s, rQ, sQ_a, copy_a, rK, shifted(sK_b, offset), copy_b, thread);
    Tensor s = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    Tensor o = make_tensor(acc_o.data(), rowcol(acc_o.layout()));
    softmax_tile_scores<BN>(s, rowcol_cs, st, p, span, a0, rows, n * BN, scale_log2, RescaleRow<decltype(o)>{o});

    Tensor p_tile = make_tensor_like<T>(acc_s);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) p_tile(i) = T(acc_s(i));  // round to nearest even
    Tensor rP = make_tensor(p_tile.data(), acc_as_a(p_tile.layout()));
    gemm_rs(mma, acc_o, rP, rVt, shifted(sVt_b, offset), copy_bt, thread);
  }

  // Finalize: O / l, lse; O through shared memory (Q's, once every warp is past it).
  Tensor o = make_tensor(acc_o.data(), rowcol(acc_o.layout()));
  finish_rows(o, rowcol_cs, st, p, span, h, a0, rows);
  Tensor o_out = rounded<T>(acc_o);
  cp_async_wait<0>();  // with no kv tile, Q's copy may still be landing where O goes
  __syncthreads();
  Tensor go = global_tile<T, BM, D>(p.o, q_offset, tile.q_stride);
  store_fragment<Cfg>(mma, o_out, sQ, go, rows, thread);
}

}  // namespace

const char* missing() { return nullptr; }

bool instantiated(int dtype, int head_dim) {
  return FlashDtypes::contains(dtype) && FlashHeadDims::contains(head_dim);
}

int forward_block_m(int head_dim, FlashArch arch) { return flash_forward_tile(head_dim, arch).block_m; }

bool forward(const AttentionFwdParams& p, const int64_t* q_tile_prefix, int64_t q_tiles, std::string& failure) {
  return switch_flash_instance(p.dtype, p.head_dim, "flash forward", failure, [&](auto instance) {
    using I = decltype(instance);
    using Cfg = ForwardConfig<typename I::Element, I::kDim>;
    return launch_tiles<Cfg>(forward_kernel<Cfg>, "flash forward", q_tiles, "tiles", p.heads_q, 1, failure, p,
                             q_tile_prefix);
  });
}

}  // namespace attn_oracle::gpu::flash
