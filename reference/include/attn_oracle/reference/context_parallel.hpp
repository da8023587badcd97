// context_parallel.hpp: the oracle of context parallelism
// (docs/semantics.md#91-context-parallelism). What each rank's kernel call must be given is defined
// from the explicit mask restricted to that rank: its query tokens against the keys it
// meets at that step. Written apart from the host simulation
// (seam/context_parallel.hpp): the permutation here is derived token by token
// (each token's rank, then row order), the simulation's chunk by chunk.
//
// A rank problem (model/context_parallel.hpp: the rank's queries against the
// keys it meets, bottom-right kinds written top-left) is an ordinary packed
// problem, so its metadata is docs/semantics.md#3-metadata's and its floats
// docs/semantics.md#5-attention-outputs-and-gradients's. Tested by tests/context_parallel_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/metadata.hpp"

namespace attn_oracle::ref {

// [B, T]: the row token of each rank's local slot, rank-major (context_parallel.hpp).
Expected<std::vector<int64_t>> cp_permutation(const CpLayout& layout, const AttentionProblem& problem);

// Rank `rank`'s problem at `step` under the oracle's permutation, for a
// problem and layout validate_cp accepts (its error otherwise).
Expected<CpRankProblem> cp_rank_problem(const CpLayout& layout, const AttentionProblem& problem, int64_t rank,
                                        int64_t step);

// The metadata that rank's kernel call must be given (docs/semantics.md#3-metadata on its problem).
Expected<Metadata> cp_rank_metadata(const CpLayout& layout, const AttentionProblem& problem, int64_t rank,
                                    int64_t step);

// Every rank's attended (query, key) pairs, window included, for the token
// split `permutation` ([B, T], rank-major); all_to_all splits heads, not
// tokens, so its ranks share every pair equally.
std::vector<int64_t> cp_rank_pairs(const CpLayout& layout, const AttentionProblem& problem,
                                   const std::vector<int64_t>& permutation);

// max / mean of cp_rank_pairs: 1 when balanced; 1 when nothing is attended.
double cp_imbalance(const std::vector<int64_t>& rank_pairs);

// Two partial results of the same queries over disjoint keys merged as a ring
// does: lse = log(exp(lse_a) + exp(lse_b)), o = o_a exp(lse_a - lse) + o_b exp(lse_b - lse).
// o [rows, tokens, heads, head_dim], lse [rows, heads, tokens]; a query neither
// part attends keeps o = 0, lse = -inf.
void merge_by_lse(std::vector<double>& o, std::vector<double>& lse, const std::vector<double>& o_part,
                  const std::vector<double>& lse_part, int64_t rows, int64_t tokens, int64_t heads,
                  int64_t head_dim);

}  // namespace attn_oracle::ref
