// reference/small_seq.hpp: the float64 reference of the small-sequence problem
// (docs/semantics.md#8-small-sequence-problems; the problem and its validation are
// attn_oracle/model/small_seq.hpp). Tested by tests/small_seq_reference_test.cpp.
#pragma once

#include "attn_oracle/model/small_seq.hpp"

namespace attn_oracle::ref {

// Float64: scores against the document's keys with the explicit mask of
// docs/semantics.md#2-the-attention-mask (window included), softmax, P V; backward from P.
Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs);

}  // namespace attn_oracle::ref
