// flash_layout_test.cpp: the register layouts of the tensor-core attention kernels
// (gpu/src/flash/), checked on the host thread by thread. The kernels' row steps
// trust three facts about CuTe's partitions, which no CPU can run but CuTe's
// layout algebra can compute here with the very types the kernels use
// (flash_config.hpp, compiled by g++):
//  - a row of rowcol(S) is one row of the tile, held by the 4 threads of a quad,
//    whose columns together are the tile's columns once each (the shuffles of
//    quad_max / quad_sum reduce exactly one row);
//  - rowcol(O)'s row i is rowcol(S)'s row i (one softmax state per row index);
//  - acc_as_a(S) holds, value for value, the coordinates the MMA's A operand
//    expects (P feeds P V without a trip through shared memory);
// and that the global copies' row predicate reads one row per m. The backward
// kernels trust the same for their own tiles (S^T of keys by queries in dK/dV, S of
// queries by keys in dQ), and that the transposed shared-memory views (a column
// part of Q / dO read as (d, row), K read as (d, key)) address the elements they name.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "flash/flash_config.hpp"

namespace attn_oracle::gpu::flash {
namespace {

template <class Cfg>
void check_forward_layouts() {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  typename Cfg::Mma mma;
  std::set<std::pair<int, int>> covered;
  std::vector<std::vector<std::pair<int, int>>> rows_of(Cfg::kThreads);  // (row, first col) per row index
  for (int t = 0; t < Cfg::kThreads; ++t) {
    auto thr = mma.get_slice(t);
    auto cs = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    auto rc = make_tensor(cs.data(), rowcol(cs.layout()));
    auto co = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    auto rco = make_tensor(co.data(), rowcol(co.layout()));
    ASSERT_EQ(int(size<0>(rc)), int(size<0>(rco))) << "S and O have different row counts per thread";
    for (int i = 0; i < size<0>(rc); ++i) {
      const int row = get<0>(rc(i, 0));
      rows_of[t].push_back({row, int(get<1>(rc(i, 0)))});
      for (int j = 0; j < size<1>(rc); ++j) {
        ASSERT_EQ(int(get<0>(rc(i, j))), row) << "thread " << t << ": S row index " << i << " spans two rows";
        ASSERT_TRUE(covered.insert({row, int(get<1>(rc(i, j)))}).second) << "element held twice";
      }
      for (int j = 0; j < size<1>(rco); ++j)
        ASSERT_EQ(int(get<0>(rco(i, j))), row) << "thread " << t << ": O row " << i << " is not S row " << i;
    }
    // P as the A operand: the coordinates of acc_as_a(S) are those of partition_A.
    auto ca = thr.partition_A(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    auto pa = make_tensor(cs.data(), acc_as_a(cs.layout()));
    ASSERT_EQ(int(size(ca)), int(size(pa)));
    for (int v = 0; v < size(ca); ++v) {
      ASSERT_EQ(int(get<0>(pa(v))), int(get<0>(ca(v)))) << "thread " << t << ", value " << v;
      ASSERT_EQ(int(get<1>(pa(v))), int(get<1>(ca(v)))) << "thread " << t << ", value " << v;
    }
  }
  EXPECT_EQ(int(covered.size()), BM * BN);
  // A quad (threads 4q .. 4q + 3) shares its rows, and exactly one of them holds column 0 of each.
  for (int t = 0; t < Cfg::kThreads; ++t)
    for (size_t i = 0; i < rows_of[t].size(); ++i) {
      int holders = 0;
      for (int u = t & ~3; u < (t & ~3) + 4; ++u) {
        ASSERT_EQ(rows_of[u][i].first, rows_of[t][i].first) << "threads " << t << " and " << u << " of one quad";
        holders += rows_of[u][i].second == 0;
      }
      ASSERT_EQ(holders, 1) << "row " << rows_of[t][i].first << ": the lse writer is not unique";
    }
  // The global copies: every value of (_, m, _) lies on the row the predicate reads.
  typename Cfg::GmemLoad load;
  for (int t = 0; t < Cfg::kThreads; ++t) {
    auto c = load.get_slice(t).partition_S(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    for (int m = 0; m < size<1>(c); ++m)
      for (int v = 0; v < size<0>(c); ++v)
        for (int k = 0; k < size<2>(c); ++k) ASSERT_EQ(int(get<0>(c(v, m, k))), int(get<0>(c(0, m, 0))));
  }
  EXPECT_LE(Cfg::kSmemBytes, size_t(227 * 1024)) << "over an H100's shared memory per block";
}

// An MMA tile (rows, cols) of C: rowcol's row i is one tile row and its column j
// one tile column for every thread (the backward reads a row's or a column's lse
// and delta once for all of it); every element held once; acc_as_a is the A operand.
template <class Mma, int kRows, int kCols, int kThreads>
void check_c_tile(const Mma& mma) {
  std::set<std::pair<int, int>> covered;
  for (int t = 0; t < kThreads; ++t) {
    auto thr = mma.get_slice(t);
    auto cs = thr.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
    auto rc = make_tensor(cs.data(), rowcol(cs.layout()));
    for (int i = 0; i < size<0>(rc); ++i)
      for (int j = 0; j < size<1>(rc); ++j) {
        ASSERT_EQ(int(get<0>(rc(i, j))), int(get<0>(rc(i, 0)))) << "thread " << t << ": row index " << i;
        ASSERT_EQ(int(get<1>(rc(i, j))), int(get<1>(rc(0, j)))) << "thread " << t << ": column index " << j;
        ASSERT_TRUE(covered.insert({int(get<0>(rc(i, j))), int(get<1>(rc(i, j)))}).second) << "element held twice";
      }
    auto ca = thr.partition_A(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
    auto pa = make_tensor(cs.data(), acc_as_a(cs.layout()));
    ASSERT_EQ(int(size(ca)), int(size(pa)));
    for (int v = 0; v < size(ca); ++v) {
      ASSERT_EQ(int(get<0>(pa(v))), int(get<0>(ca(v)))) << "thread " << t << ", value " << v;
      ASSERT_EQ(int(get<1>(pa(v))), int(get<1>(ca(v)))) << "thread " << t << ", value " << v;
    }
  }
  EXPECT_EQ(int(covered.size()), kRows * kCols);
}

template <class Cfg>
void check_dkdv_layouts() {
  constexpr int BN = Cfg::kBlockN, BM = Cfg::kBlockM, D = Cfg::kDim, DP = Cfg::kDimPart;
  typename Cfg::Mma mma;
  check_c_tile<decltype(mma), BN, BM, Cfg::kThreads>(mma);  // S^T, dP^T
  check_c_tile<decltype(mma), BN, DP, Cfg::kThreads>(mma);  // dK, dV
  // Column part `part` of a Q / dO stage, read as (d, row) from column_part_offset on.
  typename Cfg::SmemQ q;
  typename Cfg::SmemQPartT qt;
  for (int part = 0; part < Cfg::kSplit; ++part)
    for (int d = 0; d < DP; ++d)
      for (int r = 0; r < BM; ++r)
        ASSERT_EQ((column_part_offset<BM, D, DP>(part) + int(qt(d, r))), int(q(r, part * DP + d)))
            << "part " << part << ", column " << d << ", row " << r;
  EXPECT_LE(Cfg::kSmemBytes, size_t(227 * 1024)) << "over an H100's shared memory per block";
}

template <class Cfg>
void check_dq_layouts() {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, D = Cfg::kDim;
  typename Cfg::Mma mma;
  check_c_tile<decltype(mma), BM, BN, Cfg::kThreads>(mma);  // S, dP
  // dQ's row i is S's row i: the row's lse and delta, read once, serve both.
  for (int t = 0; t < Cfg::kThreads; ++t) {
    auto thr = mma.get_slice(t);
    auto cs = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    auto cq = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    auto rs = make_tensor(cs.data(), rowcol(cs.layout()));
    auto rq = make_tensor(cq.data(), rowcol(cq.layout()));
    ASSERT_EQ(int(size<0>(rs)), int(size<0>(rq)));
    for (int i = 0; i < size<0>(rs); ++i) ASSERT_EQ(int(get<0>(rq(i, 0))), int(get<0>(rs(i, 0)))) << "thread " << t;
  }
  typename Cfg::SmemKV k;
  typename Cfg::SmemKt kt;
  for (int d = 0; d < D; ++d)
    for (int n = 0; n < BN; ++n) ASSERT_EQ(int(kt(d, n)), int(k(n, d))) << "column " << d << ", key " << n;
  EXPECT_LE(Cfg::kSmemBytes, size_t(227 * 1024)) << "over an H100's shared memory per block";
}

TEST(FlashLayouts, ForwardBf16HeadDim64) { check_forward_layouts<ForwardConfig<bfloat16_t, 64>>(); }
TEST(FlashLayouts, ForwardBf16HeadDim128) { check_forward_layouts<ForwardConfig<bfloat16_t, 128>>(); }
TEST(FlashLayouts, ForwardFp16HeadDim256) { check_forward_layouts<ForwardConfig<half_t, 256>>(); }
TEST(FlashLayouts, BackwardDkdvHeadDim64) { check_dkdv_layouts<DkdvConfig<bfloat16_t, 64>>(); }
TEST(FlashLayouts, BackwardDkdvHeadDim128) { check_dkdv_layouts<DkdvConfig<half_t, 128>>(); }
TEST(FlashLayouts, BackwardDkdvHeadDim256) { check_dkdv_layouts<DkdvConfig<bfloat16_t, 256>>(); }
TEST(FlashLayouts, BackwardDqHeadDim64) { check_dq_layouts<DqConfig<half_t, 64>>(); }
TEST(FlashLayouts, BackwardDqHeadDim128) { check_dq_layouts<DqConfig<bfloat16_t, 128>>(); }
TEST(FlashLayouts, BackwardDqHeadDim256) { check_dq_layouts<DqConfig<half_t, 256>>(); }

}  // namespace
}  // namespace attn_oracle::gpu::flash
