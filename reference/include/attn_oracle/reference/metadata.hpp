// metadata.hpp: ground truth for docs/semantics.md#2-the-attention-mask and
// docs/semantics.md#3-metadata.
//
// Builds the explicit [Tq, Tkv] boolean mask of each broadcast row from ids and
// positions (segment term AND causal / bottom-right term AND window), then reads
// every metadata integer off that mask: a q token is valid iff its mask row has a
// true entry ignoring the window; a kv token iff its column does. Slow and
// obvious on purpose: every (query, key) pair of one id is put to the rule, one
// pair at a time (O(sum over documents of Lq x Lkv) per row; pairs of different
// ids fail the segment term unasked); the O(T) production algorithm is judged by it.
//
// Representability (docs/semantics.md#the-kernels-index-rule-and-representability): the kernels see
// each document as two trimmed runs and apply a rule by index. `representability` rebuilds the mask
// from that rule and compares it with the explicit mask, naming the first pair that differs.
//
// Tested by the fixtures of docs/semantics.md#10-worked-examples (tests/fixtures_test.cpp: the
// worked examples, hand-computed cases) and by the metadata properties.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::ref {

// A run [first, end) of consecutive keys of a row.
struct KeyRun {
  int64_t first = 0, end = 0;
};

// The [Tq, Tkv] mask of one broadcast row, stored by query: query i attends
// the keys of runs[run_start[i]] .. runs[run_start[i + 1] - 1] (disjoint, in key
// order). On a valid batch that is one run (a document's keys are contiguous
// and its positions increase, so every term cuts a span), so the mask takes
// O(Tq) memory where the [Tq, Tkv] flags took 256 MiB for one 16k-token row.
struct RowMask {
  int64_t q_len = 0, kv_len = 0;
  std::vector<int64_t> run_start;  // q_len + 1 entries
  std::vector<KeyRun> runs;
  bool operator()(int64_t i, int64_t j) const;
  bool attends(int64_t i) const { return run_start[i] < run_start[i + 1]; }
  const KeyRun* keys_begin(int64_t i) const { return runs.data() + run_start[i]; }
  const KeyRun* keys_end(int64_t i) const { return runs.data() + run_start[i + 1]; }
  // Row-major [Tq, Tkv] flags, 1 where attended: for small rows (bindings, tests).
  std::vector<char> dense() const;
};

// The mask of docs/semantics.md#2-the-attention-mask for broadcast row `row` of a validated batch.
// `with_window = false` gives the mask that metadata is derived from.
RowMask explicit_mask(const PackedBatch& batch, const BatchLayout& layout, int64_t row,
                      bool with_window);

// Validates, then derives every metadata integer from the explicit masks.
Expected<Metadata> metadata(const PackedBatch& batch);

struct Representability {
  bool representable = true;
  std::string first_difference;  // empty when representable
};

// Compares the kernels' index rule on the trimmed runs with the explicit mask
// (window included) for every document of every row. Requires a valid batch.
Representability representability(const PackedBatch& batch);

// The index rule the kernels apply inside one document's trimmed runs:
// a = q index, b = kv index within the runs of lengths lq, lkv.
bool kernel_rule_allows(MaskKind mask, Window window, int64_t a, int64_t b, int64_t lq,
                        int64_t lkv);

}  // namespace attn_oracle::ref
