// tile_faults.cpp: see tile_faults.hpp. The references' templates
// (reference/src/blocked_attention.hpp) instantiated with steps derived from the
// exact ones (ExactTile), each overriding the step its fault lives in. The steps
// sit in this file's unnamed namespace, so each instantiation is this file's own
// and never meets the library's.
#include "planted/tile_faults.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "blocked_attention.hpp"

namespace attn_oracle::planted {
namespace {

using ref::tiles::ExactTile;
using ref::tiles::Flags;
using ref::tiles::kNegInf;
using ref::tiles::Matrix;

enum class SoftmaxMistake { lse_without_row_max, sums_masked_entries };

// ExactTile::masked_softmax with one mistake.
template <SoftmaxMistake mistake>
void faulty_masked_softmax(Eigen::Block<Matrix> p, const Eigen::Block<Flags>& allowed, double scale, double* lse) {
  for (int64_t i = 0; i < p.rows(); ++i) {
    double row_max = kNegInf;
    bool any = false;
    for (int64_t j = 0; j < p.cols(); ++j)
      if (allowed(i, j)) {
        any = true;
        row_max = std::max(row_max, p(i, j) *= scale);
      }
    if (!any) {
      p.row(i).setZero();
      lse[i] = kNegInf;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < p.cols(); ++j) {
      if (allowed(i, j)) {
        sum += p(i, j) = std::exp(p(i, j) - row_max);
        continue;
      }
      if (mistake == SoftmaxMistake::sums_masked_entries) sum += std::min(std::exp(p(i, j) * scale - row_max), 1.0);
      p(i, j) = 0.0;
    }
    for (int64_t j = 0; j < p.cols(); ++j) p(i, j) /= sum;
    lse[i] = (mistake == SoftmaxMistake::lse_without_row_max ? 0.0 : row_max) + std::log(sum);
  }
}

struct LseWithoutRowMax : ExactTile {
  static void masked_softmax(Eigen::Block<Matrix> p, const Eigen::Block<Flags>& allowed, double scale, double* lse) {
    faulty_masked_softmax<SoftmaxMistake::lse_without_row_max>(p, allowed, scale, lse);
  }
};

struct SoftmaxSumsMaskedEntries : ExactTile {
  static void masked_softmax(Eigen::Block<Matrix> p, const Eigen::Block<Flags>& allowed, double scale, double* lse) {
    faulty_masked_softmax<SoftmaxMistake::sums_masked_entries>(p, allowed, scale, lse);
  }
};

struct PvSkipsLastKey : ExactTile {
  template <class P, class V, class O>
  static void output(const P& p, const V& v, O& o) {
    const int64_t n = p.cols();
    if (n > 1) o.noalias() = p.leftCols(n - 1) * v.topRows(n - 1);
    else o.noalias() = p * v;
  }
};

struct DsWithoutDelta : ExactTile {
  template <class P, class DP, class Delta>
  static void delta(const P&, const DP&, Delta& out) {
    out.setZero();
  }
};

template <class Steps>
TileFault fault(std::string name) {
  ReferenceCalls oracle;
  oracle.dense = ref::blocked::dense_masked<Steps>;
  oracle.per_document = ref::blocked::per_document<Steps>;
  return TileFault{std::move(name), oracle};
}

}  // namespace

std::vector<TileFault> tile_faults() {
  return {fault<LseWithoutRowMax>("lse_without_row_max"), fault<SoftmaxSumsMaskedEntries>("softmax_sums_masked_entries"),
          fault<PvSkipsLastKey>("pv_skips_last_key"), fault<DsWithoutDelta>("ds_without_delta")};
}

}  // namespace attn_oracle::planted
