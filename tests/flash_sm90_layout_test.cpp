// flash_sm90_layout_test.cpp: the register and shared-memory layouts of the Hopper
// attention forward (gpu/src/flash/flash_fwd_sm90.cu), checked on the host thread by
// thread with the very types the kernel uses (flash_config_sm90.hpp, compiled by
// g++), as flash_layout_test.cpp does for the SM80 kernels. The kernel trusts:
//  - a row of rowcol_gmma(S) is one row of the tile, held by the 4 threads of a quad
//    (quad_max / quad_sum reduce exactly one row), and the two consumer warpgroups
//    hold the tile's elements once each;
//  - rowcol_gmma(O)'s row i is rowcol_gmma(S)'s row i (one softmax state per row),
//    and its values j, j + 1 (j even) are neighbouring columns (one 32-bit store);
//  - acc_as_a_gmma(S) holds, value for value, the coordinates the P V wgmma's
//    register A operand expects;
//  - the V^T view names, for (d, n, stage), V's element (n, d, stage);
//  - a block's shared memory fits the 227 KiB an sm_90 block may have;
// and for the backward (flash_bwd_sm90.cu): each step's S^T (dK / dV) or S (dQ),
// rounded, is value for value the register A operand of the next product, whose
// accumulator is stored by column pairs; the Q^T, dO^T and K^T views name the
// elements they transpose, and each column part of Q^T, dO^T (D = 256) names its
// own columns; both blocks' shared memory fits.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "flash/flash_config_sm90.hpp"

namespace attn_oracle::gpu::flash {
namespace {

template <class Cfg>
void check_forward_sm90_layouts() {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  typename Cfg::MmaQK mma_qk;
  typename Cfg::MmaPV mma_pv;
  ASSERT_EQ(int(size(mma_qk)), Cfg::kConsumerThreads);
  ASSERT_EQ(int(size(mma_pv)), Cfg::kConsumerThreads);
  std::set<std::pair<int, int>> covered;
  for (int t = 0; t < Cfg::kConsumerThreads; ++t) {
    auto thr = mma_qk.get_slice(t);
    auto cs = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    auto rc = make_tensor(cs.data(), rowcol_gmma(cs.layout()));
    auto co = mma_pv.get_slice(t).partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    auto rco = make_tensor(co.data(), rowcol_gmma(co.layout()));
    ASSERT_EQ(int(size<0>(rc)), int(size<0>(rco))) << "S and O have different row counts per thread";
    for (int i = 0; i < size<0>(rc); ++i) {
      const int row = get<0>(rc(i, 0));
      for (int j = 0; j < size<1>(rc); ++j) {
        ASSERT_EQ(int(get<0>(rc(i, j))), row) << "thread " << t << ": S row index " << i << " spans two rows";
        ASSERT_TRUE(covered.insert({row, int(get<1>(rc(i, j)))}).second) << "element held twice";
      }
      for (int j = 0; j < size<1>(rco); ++j)
        ASSERT_EQ(int(get<0>(rco(i, j))), row) << "thread " << t << ": O row " << i << " is not S row " << i;
      for (int j = 0; j < size<1>(rco); j += 2)  // store_o writes columns j and j + 1 as one 32-bit word
        ASSERT_EQ(int(get<1>(rco(i, j + 1))), int(get<1>(rco(i, j))) + 1) << "thread " << t << ", O column " << j;
      ASSERT_EQ(int(get<1>(rco(i, 0))) % 2, 0) << "thread " << t << ": an O pair starts at an odd column";
      // The quad's other threads hold the same row at the same index.
      const int quad0 = t & ~3;
      for (int u = quad0; u < quad0 + 4; ++u) {
        auto cu = mma_qk.get_slice(u).partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
        ASSERT_EQ(int(get<0>(make_tensor(cu.data(), rowcol_gmma(cu.layout()))(i, 0))), row)
            << "threads " << t << " and " << u << " of one quad hold different rows";
      }
    }
    // P as the A operand of P V: the coordinates of acc_as_a_gmma(S) are those of partition_A.
    auto ca = mma_pv.get_slice(t).partition_A(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    auto pa = make_tensor(cs.data(), acc_as_a_gmma(cs.layout()));
    ASSERT_EQ(int(size(ca)), int(size(pa)));
    for (int v = 0; v < size(ca); ++v) {
      ASSERT_EQ(int(get<0>(pa(v))), int(get<0>(ca(v)))) << "thread " << t << ", value " << v;
      ASSERT_EQ(int(get<1>(pa(v))), int(get<1>(ca(v)))) << "thread " << t << ", value " << v;
    }
  }
  EXPECT_EQ(int(covered.size()), BM * BN);

  typename Cfg::SmemKV kv;
  typename Cfg::SmemVt vt;
  for (int s = 0; s < Cfg::kStages; ++s)
    for (int n = 0; n < BN; ++n)
      for (int d = 0; d < D; ++d) ASSERT_EQ(int(vt(d, n, s)), int(kv(n, d, s))) << "V^T (" << d << ", " << n << ")";
  EXPECT_LE(sizeof(SharedSm90<Cfg>), size_t(227 * 1024));
}

// The backward's two products of a step: MmaS gives S (or S^T) as an (M, K)
// accumulator, whose rounded values are MmaG's register A operand; MmaG's (M, N)
// accumulator is stored by column pairs.
template <class MmaS, class MmaG, int M, int K, int N>
void check_backward_products() {
  MmaS mma_s;
  MmaG mma_g;
  ASSERT_EQ(int(size(mma_s)), 256);
  ASSERT_EQ(int(size(mma_g)), 256);
  std::set<std::pair<int, int>> covered;
  for (int t = 0; t < 256; ++t) {
    auto cs = mma_s.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<K>>{}));
    auto rc = make_tensor(cs.data(), rowcol_gmma(cs.layout()));
    for (int i = 0; i < size<0>(rc); ++i)
      for (int j = 0; j < size<1>(rc); ++j) {
        ASSERT_EQ(int(get<0>(rc(i, j))), int(get<0>(rc(i, 0)))) << "thread " << t << ": row index " << i;
        ASSERT_TRUE(covered.insert({int(get<0>(rc(i, j))), int(get<1>(rc(i, j)))}).second) << "element held twice";
      }
    auto ca = mma_g.get_slice(t).partition_A(make_identity_tensor(Shape<Int<M>, Int<K>>{}));
    auto pa = make_tensor(cs.data(), acc_as_a_gmma(cs.layout()));
    ASSERT_EQ(int(size(ca)), int(size(pa)));
    for (int v = 0; v < size(ca); ++v) {
      ASSERT_EQ(int(get<0>(pa(v))), int(get<0>(ca(v)))) << "thread " << t << ", value " << v;
      ASSERT_EQ(int(get<1>(pa(v))), int(get<1>(ca(v)))) << "thread " << t << ", value " << v;
    }
    auto cg = mma_g.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    auto rg = make_tensor(cg.data(), rowcol_gmma(cg.layout()));
    for (int i = 0; i < size<0>(rg); ++i)
      for (int j = 0; j < size<1>(rg); j += 2) {
        ASSERT_EQ(int(get<0>(rg(i, j + 1))), int(get<0>(rg(i, j))));
        ASSERT_EQ(int(get<1>(rg(i, j + 1))), int(get<1>(rg(i, j))) + 1) << "thread " << t << ", column " << j;
      }
  }
  EXPECT_EQ(int(covered.size()), M * K);
}

// A staged (rows, D) layout and its transposed view name the same elements.
template <class Smem, class SmemT, int kRows, int D, int kStages>
void check_transposed() {
  Smem smem;
  SmemT t;
  for (int s = 0; s < kStages; ++s)
    for (int r = 0; r < kRows; ++r)
      for (int d = 0; d < D; ++d) ASSERT_EQ(int(t(d, r, s)), int(smem(r, d, s))) << "(" << d << ", " << r << ")";
}

// Part p of the (d, row, stage) view, kCols columns from p * kCols on, at the
// offset the kernel adds (the staged layout at (0, p * kCols, 0)).
template <class Smem, class SmemTPart, int kRows, int kCols, int kParts, int kStages>
void check_column_parts() {
  Smem smem;
  SmemTPart part;
  for (int p = 0; p < kParts; ++p) {
    const int offset = smem(0, p * kCols, 0);
    for (int s = 0; s < kStages; ++s)
      for (int r = 0; r < kRows; ++r)
        for (int d = 0; d < kCols; ++d)
          ASSERT_EQ(int(part(d, r, s)) + offset, int(smem(r, p * kCols + d, s))) << "part " << p << " (" << d << ", "
                                                                                   << r << ", " << s << ")";
  }
}

template <class T, int D>
void check_backward_sm90_layouts() {
  using Kv = DkdvSm90Config<T, D>;
  check_backward_products<typename Kv::MmaS, typename Kv::MmaG, Kv::kBlockN, Kv::kBlockM, Kv::kDimPart>();
  check_transposed<typename Kv::SmemQ, typename Kv::SmemQt, Kv::kBlockM, D, Kv::kStages>();
  check_column_parts<typename Kv::SmemQ, typename Kv::SmemQtPart, Kv::kBlockM, Kv::kDimPart, Kv::kParts,
                     Kv::kStages>();
  EXPECT_LE(sizeof(SharedDkdvSm90<Kv>), size_t(227 * 1024));
  using Q = DqSm90Config<T, D>;
  check_backward_products<typename Q::MmaS, typename Q::MmaG, Q::kBlockM, Q::kBlockN, D>();
  check_transposed<typename Q::SmemKV, typename Q::SmemKt, Q::kBlockN, D, Q::kStages>();
  EXPECT_LE(sizeof(SharedDqSm90<Q>), size_t(227 * 1024));
}

TEST(FlashSm90Layouts, ForwardBf16HeadDim64) { check_forward_sm90_layouts<ForwardSm90Config<bfloat16_t, 64>>(); }
TEST(FlashSm90Layouts, ForwardFp16HeadDim128) { check_forward_sm90_layouts<ForwardSm90Config<half_t, 128>>(); }
TEST(FlashSm90Layouts, ForwardBf16HeadDim256) { check_forward_sm90_layouts<ForwardSm90Config<bfloat16_t, 256>>(); }

TEST(FlashSm90Layouts, BackwardFp16HeadDim64) { check_backward_sm90_layouts<half_t, 64>(); }
TEST(FlashSm90Layouts, BackwardBf16HeadDim128) { check_backward_sm90_layouts<bfloat16_t, 128>(); }
TEST(FlashSm90Layouts, BackwardFp16HeadDim256) { check_backward_sm90_layouts<half_t, 256>(); }

}  // namespace
}  // namespace attn_oracle::gpu::flash
