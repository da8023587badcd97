// input_domain.hpp: the inputs a backend takes, declared once (Backend::domain(),
// the `domain` of a worker's hello, a Python backend's `domain` attribute), so
// that the generators draw inside it and a budget of N draws judges about N.
// The `unsupported` hooks stay for what a domain cannot say (a size limit, a
// combination of fields).
//
// A domain has shape fields (the kind of call: self-attention, rows, extra
// dims, mask kinds, windows, dtypes, head dims) and content fields (what the
// ids and positions of a *valid* input look like: no padding, positions from
// 0). An invalid input is inside the domain when its shape fields hold: its
// violation is what the invalid-input properties judge, and breaking a content
// field is often that very violation (padding under a non-padding mask,
// positions that do not increase).
//
// Checked by tests/input_domain_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/model/kv_buffer.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline seam {

// The sizes a compiled backend is built for: JAX's jit and torch.compile
// compile once per new shape, and nearly every unconstrained draw has one. An
// empty list leaves that size free. Declared by a backend (its domain's
// `sizes`), the menu is part of its domain: the generators draw on it and an
// input off it is outside the domain. `check --shape-stable` draws on
// default_size_menu() for a backend that declares none, without narrowing
// what it takes.
struct SizeMenu {
  std::vector<int64_t> tokens;        // T of each side
  std::vector<int64_t> rows;          // B
  std::vector<int64_t> max_segments;  // M
  std::vector<std::pair<int64_t, int64_t>> heads;  // (heads_q, heads_kv)

  bool empty() const { return tokens.empty() && rows.empty() && max_segments.empty() && heads.empty(); }
  bool operator==(const SizeMenu&) const = default;
};

// Sides of 16, 64 or 144 tokens, 1 or 2 rows, M of 4 or 8, heads 2/1 (GQA) or
// 2/2; with it the generators draw head dims 8 and 64 and no extra dims.
SizeMenu default_size_menu();
// The head dims drawn with default_size_menu() when a domain lists none.
inline const std::vector<int64_t> kMenuHeadDims = {8, 64};

// The smallest size on the list that holds `size`; `size` itself when the list
// is empty or none does.
int64_t next_on_menu(const std::vector<int64_t>& menu, int64_t size);

struct InputDomain {
  // q and kv are one batch: the same ids, positions, T and extra dims on both
  // sides (transformers, Megatron-core and flex attention packing take one
  // position_ids / document_ids tensor).
  bool self_attention_only = false;
  // No padding token (id 0) on either side; padding mask kinds may still be
  // taken, on rows that documents fill.
  bool no_padding = false;
  // Every document's positions are 0, 1, 2, ... on both sides (no offset
  // micro-sequences, no context-parallel stripes).
  bool positions_from_zero = false;
  // Each row of each side is one sequence: at most one document, from token 0,
  // then only padding; what one length a row says (jax.nn's query_seq_lengths,
  // cuDNN's padded rows, Megatron-core's padded samples). A row may hold no
  // document (length 0).
  bool one_sequence_a_row = false;
  // The largest position taken on either side (INT32_MAX for a stack that
  // holds positions in int32); 0 for no limit. The extreme-position properties
  // move positions to the top of it rather than of int64.
  int64_t max_position = 0;
  // The most rows B a batch may have (1: one row); 0 for no limit.
  int64_t max_rows = 0;
  // Whether extra (vmapped) leading dims before [B, T] are taken.
  bool extra_dims = true;
  // Whether positions may carry the extra dims of the segment ids; false:
  // under extra dims, positions are [B, T], shared by every slice
  // (TransformerEngine JAX vmaps the segment ids only).
  bool positions_extra_dims = true;
  // The mask kinds taken; empty for all six.
  std::vector<MaskKind> mask_kinds;
  // Whether a sliding window other than (-1, -1) is taken.
  bool windows = true;
  // A window only where it ends at the query: its right side 0, or any under a
  // causal kind, whose causal term makes the right side moot (cuDNN's
  // sliding_window_length W is the band (i - W, i]).
  bool causal_windows_only = false;
  // The dtypes taken; empty for all three.
  std::vector<Dtype> dtypes;
  // The head dims taken; empty for any.
  std::vector<int64_t> head_dims;
  // The sizes it was compiled for; empty for any.
  SizeMenu sizes;
  // Context parallelism (docs/semantics.md#91-context-parallelism): the strategies, load
  // balancing, rank counts and stripe sizes taken; empty for all (the
  // generators then draw cp of 2, 3, 4 and 8 and stripes of 1, 2, 3, 64, 128).
  std::vector<CpStrategy> cp_strategies;
  std::vector<CpBalance> cp_balances;
  std::vector<int64_t> cp_sizes;
  std::vector<int64_t> cp_stripes;

  bool takes_mask(MaskKind kind) const;
  bool takes_dtype(Dtype dtype) const;
  bool takes_head_dim(int64_t head_dim) const;
  bool takes_cp_strategy(CpStrategy strategy) const;
  bool takes_cp_balance(CpBalance balance) const;
  bool takes_everything() const;
  bool operator==(const InputDomain&) const = default;
};

// "self-attention only, no padding, masks causal and no_mask, ..." or "every input".
std::string to_string(const InputDomain& domain);

// Why the input lies outside the domain ("q and kv differ: the backend takes
// self-attention only"), or nullopt when it is inside. Never throws, whatever
// the input (shapes that do not even validate included).
std::optional<std::string> outside_domain(const InputDomain& domain, const PackedBatch& batch);
// The batch, and the dtype and head dim (attention, small-seq, sharding).
std::optional<std::string> outside_domain(const InputDomain& domain, const AttentionProblem& problem);
// The dtype and head dim only: a K/V buffer problem is a whole sequence of
// documents whose layout the K/V buffer capability itself defines.
std::optional<std::string> outside_domain(const InputDomain& domain, const KvBufferProblem& problem);
// The layout's fields (strategy, balance, cp, stripe), then the problem.
std::optional<std::string> outside_domain(const InputDomain& domain, const CpLayout& layout,
                                          const AttentionProblem& problem);

}  // namespace attn_oracle::seam
