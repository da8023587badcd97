// flash_config_sm90.hpp: the CuTe types of the Hopper attention kernels
// (flash_fwd_sm90.cu, flash_bwd_sm90.cu): warpgroup MMAs (wgmma), shared-memory layouts in the
// canonical GMMA forms TMA writes and wgmma reads, and the register views of the
// row steps. Host code too: tests/flash_layout_test.cpp builds these types with g++
// and checks, thread by thread, the coordinates every fragment holds.
//
// A block is three warpgroups: the first loads (one thread issues TMA copies), the
// other two compute, 64 query rows each (kBlockM = 128). S = Q K^T reads both
// operands from shared memory (K-major, 128-byte swizzle); O += P V takes P from
// registers and V^T from shared memory through a transposed (MN-major) view of V's
// tiles. K and V come in kStages stages.
#pragma once

// clang-format off: CuTe's tensor.hpp must come before its atoms.
#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
// clang-format on

#include "attn_oracle/gpu/attention/flash_tile.hpp"

namespace attn_oracle::gpu::flash {

using namespace cute;

// (d, r, stage) -> the element (r, d, stage) of a staged (rows, D) K-major layout:
// its transpose, the MN-major B operand of a product whose K mode runs over the rows.
template <class Smem, int kRows, int D, int kStages>
using TransposedStages = decltype(composition(
    Smem{}, make_ordered_layout(Shape<Int<D>, Int<kRows>, Int<kStages>>{}, Step<_2, _1, _3>{})));

// The first kCols columns of a (D, rows, stages) view: the columns of part 0 when D is
// split into parts of kCols. Part p is the same view p * kCols columns on, which is
// the layout evaluated at (0, p * kCols, 0) elements on: whole swizzle atoms (1024
// bytes), so the swizzle, applied to the address, is unchanged.
template <class SmemT, int kCols, int kRows, int D, int kStages>
using ColumnPart = decltype(composition(SmemT{}, make_layout(Shape<Int<kCols>, Int<kRows>, Int<kStages>>{},
                                                               make_stride(_1{}, Int<D>{}, Int<D * kRows>{}))));

// A K-major (rows, D[, stages]) tile in shared memory, rows of 64 elements in the
// 128-byte swizzle: what TMA writes and wgmma reads.
template <class T, int... kDims>
using GmmaTile = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<Int<kDims>...>{}));

// The products of a block's two consumer warpgroups, stacked along M (64 rows each).
template <class T, int kM, int kN, int kK>  // both operands from shared memory, K-major
using SsMma = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<Int<kM>, Int<kN>, Int<kK>>>(),
                                      Layout<Shape<_2, _1, _1>>{}));
template <class T, int kM, int kN, int kK>  // A from registers, B MN-major from shared memory
using RsMma = decltype(make_tiled_mma(
    GMMA::rs_op_selector<T, T, float, Shape<Int<kM>, Int<kN>, Int<kK>>, GMMA::Major::K, GMMA::Major::MN>(),
    Layout<Shape<_2, _1, _1>>{}));

template <class T, int D>
struct ForwardSm90Config {
  static constexpr FlashTile kTile = flash_forward_tile(D, FlashArch::sm90);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kDim = D;
  static constexpr int kStages = 2, kConsumerThreads = 256, kThreads = 384;
  static_assert(kBlockM == 128 && kTile.warps == 8, "two consumer warpgroups of 64 rows");
  using Element = T;
  using MmaQK = SsMma<T, 64, kBlockN, D>;
  using MmaPV = RsMma<T, 64, D, kBlockN>;
  using SmemQ = GmmaTile<T, kBlockM, D>;
  using SmemKV = GmmaTile<T, kBlockN, D, kStages>;
  using SmemVt = TransposedStages<SmemKV, kBlockN, D, kStages>;  // V^T, the B operand of P V
  static constexpr uint32_t kQBytes = uint32_t(kBlockM * D * sizeof(T));
  static constexpr uint32_t kKVStageBytes = uint32_t(kBlockN * D * sizeof(T));
};

// The shared memory of one block: Q, K and V's stages (1024-byte aligned, as the
// 128-byte swizzle needs), then the barriers: Q landed, K / V of a stage landed,
// a stage free again (every consumer thread arrives once it is done with it).
template <class Cfg>
struct SharedSm90 {
  using T = typename Cfg::Element;
  alignas(1024) T q[cosize_v<typename Cfg::SmemQ>];
  alignas(1024) T k[cosize_v<typename Cfg::SmemKV>];
  alignas(1024) T v[cosize_v<typename Cfg::SmemKV>];
  alignas(8) uint64_t q_full;
  uint64_t k_full[Cfg::kStages], v_full[Cfg::kStages], kv_empty[Cfg::kStages];
};

// Backward on Hopper (flash_bwd_sm90.cu). The blocks are the SM80 backward's
// (flash_dkdv_tile, flash_dq_tile: 128 keys, 128 query rows, dK / dV split in two
// column parts at D = 256), so its grids serve both; the steps inside them are
// smaller, to hold the accumulators in registers.
// dK / dV: two consumer warpgroups of 64 keys each; per step (query head, q block
// of kBlockM rows) S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO and
// dK += dS^T Q for the block's kDimPart columns, with P^T, dS^T in registers; Q,
// dO (and the rows' lse, delta) in kStages stages. At D = 256 a step has 32 rows:
// K, V and two stages of Q, dO are then 192 KiB, and a thread holds 128 values of
// dK and dV (a part of 128 columns) and 32 of S^T and dP^T.
template <class T, int D>
struct DkdvSm90Config {
  static constexpr FlashDkdvTile kTile = flash_dkdv_tile(D);
  static constexpr int kBlockN = kTile.block_n, kBlockM = D <= 128 ? 64 : 32, kDim = D, kStages = 2;
  static constexpr int kParts = kTile.d_split, kDimPart = D / kParts;
  static constexpr int kConsumerThreads = 256, kThreads = 384;
  // setmaxnreg's split of the 168 x 384 registers a block starts with: at D = 64 the
  // producer spilled 8 bytes with 24 (ptxas -v), at D = 128 the consumers with 232.
  static constexpr int kProducerRegs = D <= 64 ? 32 : 24, kConsumerRegs = D <= 64 ? 232 : 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * 384);
  static_assert(kBlockN == 128 && kDimPart <= 128, "two warpgroups of 64 keys; dK and dV in registers");
  using Element = T;
  using MmaS = SsMma<T, 64, kBlockM, D>;         // S^T and dP^T: (keys, q rows)
  using MmaG = RsMma<T, 64, kDimPart, kBlockM>;  // dV and dK: (keys, the part's d)
  using SmemKV = GmmaTile<T, kBlockN, D>;
  using SmemQ = GmmaTile<T, kBlockM, D, kStages>;
  using SmemQt = TransposedStages<SmemQ, kBlockM, D, kStages>;           // Q^T, dO^T
  using SmemQtPart = ColumnPart<SmemQt, kDimPart, kBlockM, D, kStages>;  // their rows of part 0
  static constexpr uint32_t kKVBytes = uint32_t(kBlockN * D * sizeof(T));
  static constexpr uint32_t kQStageBytes = uint32_t(kBlockM * D * sizeof(T));
};

template <class Cfg>
struct SharedDkdvSm90 {
  using T = typename Cfg::Element;
  alignas(1024) T k[cosize_v<typename Cfg::SmemKV>];
  alignas(1024) T v[cosize_v<typename Cfg::SmemKV>];
  alignas(1024) T q[cosize_v<typename Cfg::SmemQ>];
  alignas(1024) T d_o[cosize_v<typename Cfg::SmemQ>];
  float lse_log2[Cfg::kStages][Cfg::kBlockM], delta[Cfg::kStages][Cfg::kBlockM];
  alignas(8) uint64_t kv_full;
  uint64_t q_full[Cfg::kStages], q_empty[Cfg::kStages];
};

// dQ: two consumer warpgroups of 64 query rows each; per key tile of kBlockN
// (flash_dq_tile's: 64, and 32 at D = 256, where Q, dO and two stages of K, V are
// 192 KiB) S = Q K^T and dP = dO V^T, then dQ += dS K with dS in registers; K and
// V in kStages stages.
template <class T, int D>
struct DqSm90Config {
  static constexpr FlashTile kTile = flash_dq_tile(D);
  static constexpr int kBlockM = kTile.block_m, kBlockN = kTile.block_n, kDim = D, kStages = 2, kParts = 1;
  static constexpr int kConsumerThreads = 256, kThreads = 384;
  static_assert(kBlockM == 128, "two warpgroups of 64 rows");
  using Element = T;
  using MmaS = SsMma<T, 64, kBlockN, D>;  // S and dP: (q rows, keys)
  using MmaG = RsMma<T, 64, D, kBlockN>;  // dQ: (q rows, d)
  using SmemQ = GmmaTile<T, kBlockM, D>;
  using SmemKV = GmmaTile<T, kBlockN, D, kStages>;
  using SmemKt = TransposedStages<SmemKV, kBlockN, D, kStages>;  // K^T
  static constexpr uint32_t kQBytes = uint32_t(kBlockM * D * sizeof(T));
  static constexpr uint32_t kKVStageBytes = uint32_t(kBlockN * D * sizeof(T));
};

template <class Cfg>
struct SharedDqSm90 {
  using T = typename Cfg::Element;
  alignas(1024) T q[cosize_v<typename Cfg::SmemQ>];
  alignas(1024) T d_o[cosize_v<typename Cfg::SmemQ>];
  alignas(1024) T k[cosize_v<typename Cfg::SmemKV>];
  alignas(1024) T v[cosize_v<typename Cfg::SmemKV>];
  alignas(8) uint64_t q_full;
  uint64_t k_full[Cfg::kStages], v_full[Cfg::kStages], kv_empty[Cfg::kStages];
};

// A warpgroup accumulator ((2, 2, N / 8), M, N) seen as (rows, cols) =
// ((2, M), (2, N / 8, N)): the values of one thread on one row of the tile.
template <class L>
CUTE_HOST_DEVICE constexpr auto rowcol_gmma(L const& acc) {
  static_assert(decltype(rank<0>(acc))::value == 3);
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),
                     make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}

// The same accumulator as the register A operand of the next wgmma,
// ((2, 2, 2), M, N / 16): two neighbouring 8-column groups are one k-block of 16.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_as_a_gmma(L const& acc) {
  auto pairs = logical_divide(get<0, 2>(acc), Tile<_2>{});  // ((2, N / 16))
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(pairs)), get<1>(acc),
                     coalesce(make_layout(get<0, 1>(pairs), get<2>(acc))));
}

}  // namespace attn_oracle::gpu::flash
