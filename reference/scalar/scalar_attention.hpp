// scalar_attention.hpp: the scalar float64 attention references that
// ref::attention_dense_masked and ref::attention_per_document replaced
// (scalar_attention.cpp). Same contract and results to rounding; for the
// property attention/oracleArithmeticMatchesScalarLoops, the tests and the benchmarks
// (target attn_oracle_reference_scalar: installed as the properties' link dependency,
// this header not).
#pragma once

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::ref::scalar {

Expected<AttentionResult> attention_dense_masked(const AttentionProblem& problem, const AttentionInputs& inputs);
Expected<AttentionResult> attention_per_document(const AttentionProblem& problem, const AttentionInputs& inputs);

}  // namespace attn_oracle::ref::scalar
