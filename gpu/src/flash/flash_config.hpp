// flash_config.hpp: the CuTe types of the tensor-core attention kernels (tiled MMA,
// shared-memory layouts, copy atoms), the register-layout views the kernels' row
// steps use, and the (dtype, head dim) grid they are instantiated for. Host code
// too: tests/flash_layout_test.cpp builds these same types with g++ and checks,
// thread by thread, the coordinates every fragment holds (the views below, the
// quad that shares a row), which no CPU can run.
//
// MMA: SM80's m16n8k16 (fp16 / bf16 in, fp32 accumulate), the warps stacked along
// M, the tile permuted to 16 columns so that one ldmatrix.x4 feeds two atoms.
// Shared memory: rows of 64 elements (128 bytes) swizzled (Swizzle<3,3,3>), so
// that the 16-byte cp.async writes and the ldmatrix reads of 8 rows spread over
// all banks; V is read transposed (ldmatrix.trans) through a (D, kBlockN) view.
#pragma once

// clang-format off: CuTe's tensor.hpp must come before its atoms.
#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
// clang-format on

#include <string>

#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "dispatch_switch.hpp"

namespace attn_oracle::gpu::flash {

using namespace cute;

// The grid every CuTe kernel is instantiated for: fp16 / bf16 x head dims 64, 128,
// 256. A development build (-DATTN_FLASH_DEV_DIM=D) compiles bf16 at D alone, in a
// fraction of the time.
#ifdef ATTN_FLASH_DEV_DIM
using FlashDtypes = Dtypes<DtypeElement<kBf16, bfloat16_t>>;
using FlashHeadDims = HeadDims<ATTN_FLASH_DEV_DIM>;
#else
using FlashDtypes = Dtypes<DtypeElement<kFp16, half_t>, DtypeElement<kBf16, bfloat16_t>>;
using FlashHeadDims = HeadDims<64, 128, 256>;
#endif

// f(KernelInstance<T, D>{}) for the problem's (dtype, head dim); outside the grid,
// false with `entry`'s failure, which names the dtype when it is the one missing.
template <class F>
bool switch_flash_instance(int dtype, int head_dim, const char* entry, std::string& failure, F&& f) {
  return switch_dtype_head_dim(FlashDtypes{}, FlashHeadDims{}, dtype, head_dim, f, [&] {
    failure = std::string(entry) + ": no kernel for " +
              (FlashDtypes::contains(dtype) ? "head_dim " + std::to_string(head_dim) : "dtype " + std::to_string(dtype));
    return false;
  });
}

template <class T>
struct MmaOp;
template <>
struct MmaOp<half_t> {
  using type = SM80_16x8x16_F32F16F16F32_TN;
};
template <>
struct MmaOp<bfloat16_t> {
  using type = SM80_16x8x16_F32BF16BF16F32_TN;
};

template <class T, int kWarps>
using FlashMma = TiledMMA<MMA_Atom<typename MmaOp<T>::type>, Layout<Shape<Int<kWarps>, _1, _1>>,
                          Tile<Int<16 * kWarps>, _16, _16>>;

// Rows of 64 elements, swizzled; any (rows, D) tile with rows % 8 == 0, D % 64 == 0.
using SmemAtom = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));

template <int kRows, int D>
using SmemTile = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kRows>, Int<D>>{}));

// 16-byte global loads and stores: 8 threads per 64-element row, kThreads / 8 rows.
template <int kThreads>
using GmemThreads = Layout<Shape<Int<kThreads / 8>, _8>, Stride<_8, _1>>;
template <class T, int kThreads>  // global -> shared by cp.async
using GmemLoadCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                                              GmemThreads<kThreads>{}, Layout<Shape<_1, _8>>{}));
template <class T, int kThreads>  // shared -> registers -> global
using GmemStoreCopy = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, T>{}, GmemThreads<kThreads>{},
                                               Layout<Shape<_1, _8>>{}));

template <class T, int D>
struct ForwardConfig {
  static constexpr FlashTile kTile = flash_forward_tile(D);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kWarps = kTile.warps;
  static constexpr int kThreads = kWarps * 32, kDim = D;
  using Element = T;
  using Mma = FlashMma<T, kWarps>;
  using SmemQ = SmemTile<kBlockM, D>;
  using SmemKV = SmemTile<kBlockN, D>;
  // (d, n) -> the element (n, d) of a K/V tile: V^T as the B operand of P V.
  using SmemVt = decltype(composition(SmemKV{}, make_layout(Shape<Int<D>, Int<kBlockN>>{}, GenRowMajor{})));
  using GmemLoad = GmemLoadCopy<T, kThreads>;
  using GmemStore = GmemStoreCopy<T, kThreads>;
  using LoadA = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadB = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadBt = Copy_Atom<SM75_U16x8_LDSM_T, T>;
  using StoreC = Copy_Atom<UniversalCopy<T>, T>;
  static constexpr size_t kQBytes = size_t(cosize(SmemQ{})) * sizeof(T);
  static constexpr size_t kKVBytes = size_t(cosize(SmemKV{})) * sizeof(T);
  static constexpr size_t kSmemBytes = kQBytes + 4 * kKVBytes;  // Q, then K and V twice (double buffer)
};

// The (rows, D) tile's columns [part * P, (part + 1) * P) are a (rows, P) tile of
// their own, part * rows * P elements in (tile_to_shape lays out 64-column blocks
// one after the other, each a whole number of swizzle periods).
template <int kRows, int D, int P>
constexpr int column_part_offset(int part) {
  static_assert(D % P == 0 && P % 64 == 0 && kRows % 8 == 0);
  return part * kRows * P;
}

// (d, r) -> the element (r, d) of a (rows, D) tile layout: its transpose, read by
// ldmatrix.trans as the B operand of a product whose K mode runs over the rows.
template <class Tile, int kRows, int D>
using Transposed = decltype(composition(Tile{}, make_layout(Shape<Int<D>, Int<kRows>>{}, GenRowMajor{})));

// Backward, dK / dV (flash_tile.hpp): the MMA's M mode runs over keys (16 a warp),
// so that S^T = K Q^T and dP^T = V dO^T leave p^T and ds^T in registers as the A
// operands of dV += p^T dO and dK += ds^T Q. K and V stay in shared memory; Q and dO
// of each q block come in two stages, with the rows' lse and delta beside them.
template <class T, int D>
struct DkdvConfig {
  static constexpr FlashDkdvTile kTile = flash_dkdv_tile(D);
  static constexpr int kBlockN = kTile.block_n, kBlockM = kTile.block_m, kWarps = kTile.warps;
  static constexpr int kSplit = kTile.d_split, kThreads = kWarps * 32, kDim = D, kDimPart = D / kSplit;
  static_assert(kBlockN == 16 * kWarps, "one 16-key slab a warp");
  using Element = T;
  using Mma = FlashMma<T, kWarps>;
  using SmemKV = SmemTile<kBlockN, D>;
  using SmemQ = SmemTile<kBlockM, D>;                      // Q and dO of one stage
  using SmemQPart = SmemTile<kBlockM, kDimPart>;           // their columns of this block's part
  using SmemQPartT = Transposed<SmemQPart, kBlockM, kDimPart>;
  using SmemOut = SmemTile<kBlockN, kDimPart>;             // dK, dV on their way out (K's, V's place)
  using GmemLoad = GmemLoadCopy<T, kThreads>;
  using GmemStore = GmemStoreCopy<T, kThreads>;
  using LoadA = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadB = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadBt = Copy_Atom<SM75_U16x8_LDSM_T, T>;
  using StoreC = Copy_Atom<UniversalCopy<T>, T>;
  static constexpr size_t kKVBytes = size_t(cosize(SmemKV{})) * sizeof(T);
  static constexpr size_t kQBytes = size_t(cosize(SmemQ{})) * sizeof(T);
  static constexpr size_t kStatsBytes = size_t(kBlockM) * sizeof(float);  // lse or delta of one stage
  // K, V; then Q and dO twice (double buffer); then lse and delta twice.
  static constexpr size_t kSmemBytes = 2 * kKVBytes + 4 * kQBytes + 4 * kStatsBytes;
  static_assert(cosize(SmemOut{}) <= cosize(SmemKV{}));
};

// Backward, dQ: as the forward, the MMA's M mode over query rows (16 a warp); Q and
// dO stay in shared memory, K and V come in two stages; K^T is read transposed as
// the B operand of dQ += ds K.
template <class T, int D>
struct DqConfig {
  static constexpr FlashTile kTile = flash_dq_tile(D);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kWarps = kTile.warps;
  static constexpr int kThreads = kWarps * 32, kDim = D;
  static_assert(kBlockM == 16 * kWarps, "one 16-row slab a warp");
  using Element = T;
  using Mma = FlashMma<T, kWarps>;
  using SmemQ = SmemTile<kBlockM, D>;  // Q, dO; dQ on its way out (Q's place)
  using SmemKV = SmemTile<kBlockN, D>;
  using SmemKt = Transposed<SmemKV, kBlockN, D>;
  using GmemLoad = GmemLoadCopy<T, kThreads>;
  using GmemStore = GmemStoreCopy<T, kThreads>;
  using LoadA = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadB = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using LoadBt = Copy_Atom<SM75_U16x8_LDSM_T, T>;
  using StoreC = Copy_Atom<UniversalCopy<T>, T>;
  static constexpr size_t kQBytes = size_t(cosize(SmemQ{})) * sizeof(T);
  static constexpr size_t kKVBytes = size_t(cosize(SmemKV{})) * sizeof(T);
  static constexpr size_t kSmemBytes = 2 * kQBytes + 4 * kKVBytes;  // Q, dO; then K and V twice
};

// An accumulator layout ((2, 2), M, N) seen as (rows, cols) = ((2, M), (2, N)): the
// values of one thread on one row of the tile, so the row steps loop over them.
template <class L>
CUTE_HOST_DEVICE constexpr auto rowcol(L const& acc) {
  auto v = get<0>(acc);
  return make_layout(make_layout(get<1>(v), get<1>(acc)), make_layout(get<0>(v), get<2>(acc)));
}

// The same accumulator as the A operand of the next product, ((2, 2, 2), M, N / 2):
// two neighbouring 16x8 C tiles hold exactly one 16x16 A tile, value for value.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_as_a(L const& acc) {
  auto d = logical_divide(acc, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(d), get<2, 0>(d)), get<1>(d), get<2, 1>(d));
}

}  // namespace attn_oracle::gpu::flash
