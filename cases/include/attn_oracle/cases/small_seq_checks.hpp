// small_seq_checks.hpp: the tolerance rule of docs/semantics.md#6-tolerance applied to
// small-seq results (docs/semantics.md#8-small-sequence-problems), shared by the small-seq
// properties, `attn-oracle replay` and tests/fixtures_test.cpp.
//
// o and P are judged like outputs (k = 2, the dtype's floor), dq / dk / dv like
// gradients (k = 3). The same-precision naive computation for o and the
// gradients is naive_same_precision of tolerance.hpp (a small-seq problem is an
// attention problem with the same mask); for P it is the fp32 softmax over the
// document's unmasked keys, rounded to the dtype (small_seq_naive_p).
#pragma once

#include <vector>

#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle::inline cases {

// [docs, Hq, 16] for a valid small-seq problem; empty when it is not one.
std::vector<double> small_seq_naive_p(const AttentionProblem& problem, const AttentionInputs& inputs);

// Checks o, P, then dq, dk, dv when the reference has gradients: those of them
// the backend produces. `inputs` are the dtype-rounded inputs both results saw.
std::vector<ToleranceCheck> check_small_seq_tolerance(const AttentionProblem& problem,
                                                      const AttentionInputs& inputs,
                                                      const SmallSeqResult& backend,
                                                      const SmallSeqResult& reference,
                                                      const ProducedOutputs& produced = {});

}  // namespace attn_oracle::cases
