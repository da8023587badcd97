// oracle.hpp: the float64 attention oracle as the properties call it. One seam
// so that a test can plant a bug in the oracle itself and see the property
// suite catch it (the tolerance rule's "oracle suspect" check, tolerance.hpp);
// nothing outside tests/ ever swaps it.
#pragma once

#include "attn_oracle/attention.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {

struct Oracle {
  using Attention = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);
  Attention dense = ref::attention_dense_masked;           // the ground truth
  Attention per_document = ref::attention_per_document;   // the kernels' view, on representable inputs
};

const Oracle& oracle();

// Installs another oracle for its lifetime (one thread, tests only).
class ScopedOracle {
 public:
  explicit ScopedOracle(Oracle replacement);
  ~ScopedOracle();
  ScopedOracle(const ScopedOracle&) = delete;
  ScopedOracle& operator=(const ScopedOracle&) = delete;

 private:
  Oracle previous_;
};

}  // namespace attn_oracle
