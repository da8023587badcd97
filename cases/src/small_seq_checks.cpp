// small_seq_checks.cpp: the tolerance rule on small-seq results. See
// small_seq_checks.hpp; exercised by the small-seq properties and their planted
// bugs (tests/planted_bugs_test.cpp) and by tests/fixtures_test.cpp.
#include "attn_oracle/cases/small_seq_checks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline cases {

std::vector<double> small_seq_naive_p(const AttentionProblem& problem, const AttentionInputs& inputs) {
  const auto docs = small_seq_documents(problem, &inputs);
  if (!docs) return {};
  const BatchLayout l = validate_shapes(problem.batch).value();
  const AttentionShape& s = problem.shape;
  const int64_t Hq = s.heads_q, Hkv = s.heads_kv, D = s.head_dim, group = Hq / Hkv;
  const auto scale = static_cast<float>(s.effective_scale());
  auto dev = [&](double x) { return static_cast<float>(round_to_dtype(x, s.dtype)); };
  std::vector<double> p(docs->size() * Hq * kSmallSeqMaxKeys, 0.0);
  int64_t cached_row = -1;
  ref::RowMask mask;
  for (size_t d = 0; d < docs->size(); ++d) {
    const SmallSeqDocument& doc = (*docs)[d];
    if (doc.row != cached_row) mask = ref::explicit_mask(problem.batch, l, cached_row = doc.row, /*with_window=*/true);
    for (int64_t h = 0; h < Hq; ++h) {
      const double* q = &inputs.q[((doc.row * l.q_len + doc.query) * Hq + h) * D];
      float s_j[kSmallSeqMaxKeys] = {}, row_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < doc.keys; ++j) {
        if (!mask(doc.query, doc.first_key + j)) continue;
        const double* k = &inputs.k[((doc.row * l.kv_len + doc.first_key + j) * Hkv + h / group) * D];
        float acc = 0.0f;
        for (int64_t c = 0; c < D; ++c) acc += dev(q[c]) * dev(k[c]);
        s_j[j] = scale * acc;
        row_max = std::max(row_max, s_j[j]);
      }
      if (std::isinf(row_max)) continue;  // attends nothing: a zero row
      float sum = 0.0f, e[kSmallSeqMaxKeys] = {};
      for (int64_t j = 0; j < doc.keys; ++j)
        if (mask(doc.query, doc.first_key + j)) sum += e[j] = std::exp(s_j[j] - row_max);
      for (int64_t j = 0; j < doc.keys; ++j)
        p[(d * Hq + h) * kSmallSeqMaxKeys + j] = round_to_dtype(e[j] / sum, s.dtype);
    }
  }
  return p;
}

std::vector<ToleranceCheck> check_small_seq_tolerance(const AttentionProblem& problem,
                                                      const AttentionInputs& inputs,
                                                      const SmallSeqResult& backend,
                                                      const SmallSeqResult& reference,
                                                      const ProducedOutputs& produced) {
  const AttentionResult naive = naive_same_precision(problem, inputs);
  const Dtype dtype = problem.shape.dtype;
  std::vector<ToleranceCheck> checks;
  checks.push_back(check_tolerance("o", backend.o, reference.o, naive.o, kOutputToleranceFactor, dtype));
  if (produced.small_seq_p)
    checks.push_back(check_tolerance("p", backend.p, reference.p, small_seq_naive_p(problem, inputs),
                                     kOutputToleranceFactor, dtype));
  if (produced.gradients) append_gradient_checks(checks, backend.grads, reference.grads, naive.grads, dtype);
  return checks;
}

}  // namespace attn_oracle::cases
