// context_parallel.hpp: context parallelism (docs/semantics.md#91-context-parallelism)
// simulated on the host over a backend's own attention and metadata, so that
// every backend with those two capabilities runs every layout and strategy.
//
// Each rank's call is model/context_parallel.hpp's rank problem: its queries
// against the keys it meets. A rank's metadata is the backend's metadata of that
// problem. A ring runs its cp steps and merges their partial (o, lse) by lse
// (merge_partial, virtual so that a broken merge can be planted); its backward
// is each rank's queries against every key (the all-gather backward: the same
// sums a ring's backward accumulates step by step, in another order), with
// dK/dV summed over the ranks (the reduce-scatter).
//
// Kernels never see positions (docs/semantics.md#the-kernels-index-rule-and-representability): a
// backend whose attention is not token-level gets each call as blocks it can represent, the
// way a CP kernel schedule splits its steps. Per document, a run of queries
// (consecutive row tokens) meets a run of keys: all of them (positions all at
// or before the first query's, or a non-causal kind: `padding`), none (every
// key after the last query), the run holding the queries (causal anchored
// bottom-right on the keys up to the last query) or, otherwise, each query
// alone against the keys at or before it. A query meeting several key runs
// (a ring step under dual_chunk_swap) merges its blocks by lse; a backward
// call never does (every strategy's backward meets a document's keys as one
// run). Windows are declined on such backends: a window counts positions, which
// the blocks do not carry.
//
// Tested by tests/context_parallel_test.cpp and the context_parallel properties.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline seam {

class SimulatedContextParallel : public ContextParallelCapability {
 public:
  SimulatedContextParallel(AttentionCapability& attention, MetadataCapability& metadata)
      : attention_(attention), metadata_(metadata) {}

  std::optional<std::string> unsupported(const CpLayout& layout, const AttentionProblem& problem) override;
  std::optional<Error> validate_layout(const CpLayout& layout, const AttentionProblem& problem) override {
    return validate_cp(layout, problem);
  }
  Expected<std::vector<int64_t>> permutation(const CpLayout& layout, const AttentionProblem& problem) override {
    return cp_permutation(layout, problem);
  }
  Expected<Metadata> rank_metadata(const CpLayout& layout, const AttentionProblem& problem, int64_t rank,
                                   int64_t step) override;
  Expected<AttentionResult> rank_attention(const CpLayout& layout, const AttentionProblem& problem,
                                           const AttentionInputs& inputs, int64_t rank, int64_t step) override;
  Expected<AttentionResult> cp_attention(const CpLayout& layout, const AttentionProblem& problem,
                                         const AttentionInputs& inputs) override;
  bool token_level_mask() const override { return attention_.token_level_mask(); }
  // Exact balance (1) where the layout promises it: all_to_all always; under a
  // causal kind without a window or padding, head_tail, and dual_chunk_swap on
  // rows of one document (every chunk pair then holds the same attended pairs).
  std::optional<double> balance_bound(const CpLayout& layout, const AttentionProblem& problem) override;

 protected:
  // Adds a partial result of the same queries over other keys into (o, lse),
  // as ref::merge_by_lse defines it; o [rows, tokens, heads, d], lse [rows, heads, tokens].
  virtual void merge_partial(std::vector<double>& o, std::vector<double>& lse, const std::vector<double>& o_part,
                             const std::vector<double>& lse_part, int64_t rows, int64_t tokens, int64_t heads,
                             int64_t head_dim);
  // The rank problem of `step` (model/context_parallel.hpp), or the error of an
  // invalid layout or a rank or step out of range.
  virtual Expected<CpRankProblem> rank_problem(const CpLayout& layout, const AttentionProblem& problem, int64_t rank,
                                               int64_t step);

 private:
  // One rank call on this backend's attention: whole (token-level) or in blocks.
  Expected<AttentionResult> call(const CpRankProblem& rank_problem, const AttentionInputs& inputs);
  Expected<AttentionResult> call_in_blocks(const CpRankProblem& rank_problem, const AttentionInputs& inputs);

  AttentionCapability& attention_;
  MetadataCapability& metadata_;
};

}  // namespace attn_oracle::seam
