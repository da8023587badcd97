// context_parallel.hpp: the data model and validator of context parallelism
// (docs/semantics.md#91-context-parallelism): a packed row's tokens split over `cp` ranks.
//
// A layout is `cp`, a strategy and a load-balancing permutation:
//  - strategy: all_gather (each rank's queries against every key, the gathered
//    K/V in the row's own order), ring (step s of rank r meets the keys rank
//    (r - s) mod cp holds; partial results merge by their lse) or all_to_all
//    (Ulysses: rank r gets the whole row for heads [r*H/cp, (r+1)*H/cp));
//  - balance: which tokens each rank holds, in which local order. Every rank
//    holds L = T / cp tokens of every row; the permutation lists, rank-major,
//    the row token each local slot holds (perm[b*T + r*L + j] = t):
//      contiguous       rank r holds [r*L, (r+1)*L);
//      dual_chunk_swap  the row in 2*cp chunks; rank r holds chunks r and 2*cp-1-r;
//      striped          the row in stripes of `stripe` tokens; stripe i goes to rank i mod cp;
//      head_tail        each span in 2*cp chunks, rank r holding chunks r and
//                       2*cp-1-r of every span, spans in row order; a span is
//                       a document with the padding after it (a document padded
//                       to a multiple of 2*cp, as cu_seqlens_padded describes
//                       it), or a row's leading padding;
//      explicit_indices the caller's [B, T] permutation.
//    Within a rank, tokens keep their row order.
//
// validate_cp: the first violation wins, in this order (each a code):
//  1. the layout alone: cp < 1, a stripe < 1 (striped), indices given to a
//     balance other than explicit_indices (cp_bad_layout);
//  2. the problem (validate_attention's codes);
//  3. ids with extra leading dims (unsupported: the layout splits [B, T] rows);
//  4. q and kv sides that differ in ids or positions (cp_not_self_attention);
//  5. all_to_all: heads_q or heads_kv not a multiple of cp (cp_heads_not_divisible);
//  6. T not a multiple of cp, of 2*cp (dual_chunk_swap) or of cp*stripe
//     (striped) (cp_not_divisible);
//  7. head_tail: a span whose length is not a multiple of 2*cp
//     (cp_document_not_divisible, naming row, document, tokens and length);
//  8. explicit_indices: not [B, T], an index outside [0, T), one listed twice,
//     or a rank's tokens out of row order (cp_bad_permutation, naming row, slot
//     and value): a rank problem keeps each document's positions increasing.
//
// The permutation here is the one the host simulation (seam/context_parallel.hpp)
// runs; the oracle derives its own, token by token (reference/context_parallel.hpp).
// Tested by tests/context_parallel_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline model {

enum class CpStrategy { all_gather, ring, all_to_all };
enum class CpBalance { contiguous, dual_chunk_swap, striped, head_tail, explicit_indices };
inline constexpr CpStrategy kAllCpStrategies[] = {CpStrategy::all_gather, CpStrategy::ring, CpStrategy::all_to_all};
inline constexpr CpBalance kAllCpBalances[] = {CpBalance::contiguous, CpBalance::dual_chunk_swap, CpBalance::striped,
                                               CpBalance::head_tail, CpBalance::explicit_indices};

std::string_view to_string(CpStrategy strategy);  // "all_gather", "ring", "all_to_all"
std::string_view to_string(CpBalance balance);    // "contiguous", "dual_chunk_swap", ...
std::optional<CpStrategy> cp_strategy_from_string(std::string_view name);
std::optional<CpBalance> cp_balance_from_string(std::string_view name);

struct CpLayout {
  int64_t cp = 1;
  CpStrategy strategy = CpStrategy::all_gather;
  CpBalance balance = CpBalance::contiguous;
  int64_t stripe = 1;  // striped only
  IntArray indices;    // explicit_indices only: [B, T], the permutation
  bool operator==(const CpLayout&) const = default;
};

// The kernel calls a rank makes: ring steps, or 1.
int64_t cp_steps(const CpLayout& layout);
// The rank whose keys rank `rank` meets at ring step `step` ((rank - step) mod cp);
// `rank` itself for the other strategies.
int64_t cp_source_rank(const CpLayout& layout, int64_t rank, int64_t step);

// nullopt when `problem` can run under `layout`; the first violation otherwise.
std::optional<Error> validate_cp(const CpLayout& layout, const AttentionProblem& problem);

// [B, T]: the row token of each rank's local slot, rank-major, for a layout
// validate_cp accepts (its error otherwise).
Expected<std::vector<int64_t>> cp_permutation(const CpLayout& layout, const AttentionProblem& problem);

// The tokens of one row a rank holds: T / cp.
int64_t cp_local_tokens(const CpLayout& layout, int64_t row_tokens);

// `values` [B, T, width] put into the rank-major order of `permutation` ([B, T]:
// slot s of a row holds row token permutation[s]), or, `inverse`, back into row
// order. Sizes are the caller's to check.
std::vector<double> cp_reorder_tokens(const std::vector<double>& values, const std::vector<int64_t>& permutation,
                                      int64_t row_tokens, int64_t width, bool inverse);

// What a context-parallel result must hold: the run (rank-major) every token
// of every row, one rank's call (`one_rank`) T / cp tokens, or under
// all_to_all every token and H / cp heads. bad_tensor_shape naming the first
// array that holds another count; nullopt when each holds its count, and for
// an invalid layout (no sizes follow from it). lse is checked where present or
// `lse_required`, gradients where present.
std::optional<Error> cp_result_shape_error(const CpLayout& layout, const AttentionProblem& problem,
                                           const AttentionResult& result, bool one_rank, bool lse_required);

// What rank `rank` computes at `step` under a token split `permutation`
// ([B, T], rank-major), written as an ordinary packed problem
// (docs/semantics.md#91-context-parallelism):
//   q   the rank's local tokens in local order (all_to_all: the whole row);
//   kv  all_gather and all_to_all: the whole row in row order (the gathered
//       K/V put back in row order); ring step s: the local tokens of rank
//       (rank - s) mod cp, in their local order;
//   heads  all_to_all: query heads [r*Hq/cp, (r+1)*Hq/cp) and the kv heads they
//       read; every head otherwise;
//   mask   the problem's, bottom-right kinds written top-left (window right
//       unbounded): on self-attention every document has as many queries as
//       keys, where the two give the same token-level mask, and only the
//       top-left one survives restriction to some of a document's tokens.
struct CpRankProblem {
  AttentionProblem problem;
  std::vector<int64_t> q_tokens;    // [B, Lq]: the row token of each query
  std::vector<int64_t> kv_tokens;   // [B, Lkv]: the row token of each key
  int64_t q_head0 = 0, kv_head0 = 0;  // the rank's first heads (all_to_all), else 0
};
// For a problem and layout validate_cp accepts and 0 <= rank < cp,
// 0 <= step < cp_steps(layout).
CpRankProblem cp_rank_problem(const CpLayout& layout, const AttentionProblem& problem,
                              const std::vector<int64_t>& permutation, int64_t rank, int64_t step);

// The unsharded inputs cut to a rank problem: q and d_o at its queries and
// heads, k and v at its keys and kv heads.
AttentionInputs cp_rank_inputs(const CpRankProblem& rank_problem, const AttentionProblem& problem,
                               const AttentionInputs& inputs);

}  // namespace attn_oracle::model
