// reference_calls.hpp: the calls the properties make into the float64 oracle
// and the model's validators, as swappable function pointers. Not the oracle: a
// seam so that a test can plant a bug in the oracle itself and see the property
// suite catch it (the tolerance rule's "oracle
// suspect" check, tolerance.hpp; the independent validity rules,
// independent_rules.hpp; the scalar cross-check of the oracle's arithmetic);
// nothing outside tests/ ever swaps it.
#pragma once

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/model/sharding.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline properties {

struct ReferenceCalls {
  using Attention = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);
  Attention dense = ref::attention_dense_masked;           // the ground truth
  Attention per_document = ref::attention_per_document;   // the kernels' view, on representable inputs
  // The model's validators, which every backend and the oracle share: the
  // properties compare them with independent_rules.hpp on every draw.
  using BatchValidator = Expected<BatchLayout> (*)(const PackedBatch&);
  using ShardingValidator = std::optional<Error> (*)(const Sharding&, const ShardedShapes&);
  BatchValidator validate_batch = validate;
  ShardingValidator validate_sharding = attn_oracle::validate_sharding;
};

const ReferenceCalls& reference_calls();

// Installs other calls for its lifetime (one thread, tests only).
class ScopedReferenceCalls {
 public:
  explicit ScopedReferenceCalls(ReferenceCalls replacement);
  ~ScopedReferenceCalls();
  ScopedReferenceCalls(const ScopedReferenceCalls&) = delete;
  ScopedReferenceCalls& operator=(const ScopedReferenceCalls&) = delete;

 private:
  ReferenceCalls previous_;
};

}  // namespace attn_oracle::properties
