// attention.hpp: the attention problem and tensors of
// docs/semantics.md#5-attention-outputs-and-gradients (data model only; the float64 references are
// attn_oracle/reference/attention.hpp).
//
// Tensors are float64 on the host, BSHD over *broadcast rows*: R = prod(extra) * B
// rows, so [R, T, H, D] is also the THD tensor [R*T, H, D] that the compacted
// metadata (ragged_offsets = row * T + start) addresses, gaps included.
//
// Semantics that are easy to get wrong:
//  - scale defaults to 1/sqrt(head_dim); query head h reads kv head h / (Hq / Hkv).
//  - a query that attends nothing (padding, outside every document, emptied by a
//    window or by bottom-right alignment) has o = 0, lse = -inf, dq = 0; kv tokens
//    nobody attends get dk = dv = 0. No NaN anywhere.
//  - lse is the natural log of the softmax denominator, [R, Hq, Tq].
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline model {

enum class Dtype { fp32, fp16, bf16 };
std::string_view to_string(Dtype dtype);
std::optional<Dtype> dtype_from_string(std::string_view name);
double round_to_dtype(double x, Dtype dtype);  // round-to-nearest-even into the type

struct AttentionShape {
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 1;
  std::optional<double> scale;  // default 1/sqrt(head_dim)
  Dtype dtype = Dtype::fp32;
  bool backward = false;
  double effective_scale() const;
  bool operator==(const AttentionShape&) const = default;
};

struct AttentionProblem {
  PackedBatch batch;
  AttentionShape shape;
  bool operator==(const AttentionProblem&) const = default;
};

struct AttentionInputs {
  std::vector<double> q;     // [R, Tq, Hq, D]
  std::vector<double> k;     // [R, Tkv, Hkv, D]
  std::vector<double> v;     // [R, Tkv, Hkv, D]
  std::vector<double> d_o;   // [R, Tq, Hq, D]; empty unless backward
  bool operator==(const AttentionInputs&) const = default;
};

struct AttentionGradients {
  std::vector<double> dq;  // [R, Tq, Hq, D]
  std::vector<double> dk;  // [R, Tkv, Hkv, D]
  std::vector<double> dv;  // [R, Tkv, Hkv, D]
};

struct AttentionResult {
  std::vector<double> o;    // [R, Tq, Hq, D]
  std::vector<double> lse;  // [R, Hq, Tq]; -infinity where the query attends nothing
  std::optional<AttentionGradients> grads;  // present iff shape.backward
};

// The outputs besides o that a backend may not produce (torch SDPA and many
// training stacks return no lse; a forward-only kernel has no gradients). A
// backend declares what it produces (Backend::outputs); properties judge only
// that, say what they did not compare, and skip a property that needs a
// missing output. A backend without gradients is never given a backward problem.
enum class Output { lse, gradients, small_seq_p };
std::string_view to_string(Output output);  // "lse", "gradients", "small-seq P"

struct ProducedOutputs {
  bool lse = true;          // AttentionResult::lse (and a micro-sequence's lse)
  bool gradients = true;    // dq, dk, dv
  bool small_seq_p = true;  // SmallSeqResult::p
  // lse stored in the problem's dtype (jax.nn, MaxText) rather than fp32: judged
  // at that precision (the naive run's lse rounded to it, its floor).
  bool lse_in_input_dtype = false;
  bool has(Output output) const;
  bool operator==(const ProducedOutputs&) const = default;
};

// Sizes of each tensor for a validated problem; the layout of rows is BatchLayout's.
struct AttentionSizes {
  int64_t rows = 0, q_len = 0, kv_len = 0;
  int64_t q_elems() const;
  int64_t kv_elems() const;
  int64_t lse_elems() const;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
};

// What a computation holds besides its tensors, for the memory budget:
//  - dense_row: one row's [Tq, Tkv] mask, scores, probabilities and dS (the
//    naive same-precision run of the tolerance rule), or query_tiles_with_mask
//    where that is more: what judging a case against the token-level truth
//    takes, so that a problem that passes with it runs on both;
//  - streaming: O(1) per query (the kernels);
//  - query_tiles: the float64 per-document reference, which works on query tiles
//    of kReferenceTileRows rows: per worker (reference_threads(), at most one a
//    unit it shares out), P, dS and the allowed flags of one
//    [tile, Tkv] block, the tile's q, o, do, dq, and K, V, dK, dV of one kv head
//    of a row with the gathered copies of a tile's keys ([Tkv, D] x 6); the
//    runs of keys each query attends (one per document query under the
//    kernels' index rule) and their index, 24 bytes a query;
//  - query_tiles_with_mask: query_tiles plus one row's explicit [Tq, Tkv] mask
//    and the list of its [tile, tile] blocks that attend anything (the dense
//    reference).
enum class ScoreMemory { dense_row, streaming, query_tiles, query_tiles_with_mask };
inline constexpr int64_t kReferenceTileRows = 64;

// Validates the batch (docs/semantics.md#1-inputs) and the heads (bad_heads), the memory
// the tensors and `scores` need (over_memory_budget), then the tensor sizes
// (bad_tensor_shape) and values (check_attention_values) when `inputs` is given.
Expected<AttentionSizes> validate_attention(const AttentionProblem& problem, const AttentionInputs* inputs = nullptr,
                                            ScoreMemory scores = ScoreMemory::dense_row);

// The values of a problem's tensors (sizes already checked; q_len / kv_len are
// the sides' T, for naming an element):
//  - non_finite_input: a non-finite scale, or an element of q, k, v or do that
//    is not finite once rounded to the dtype (70000 is inf in fp16), named by
//    tensor, flat index, row, token, head and dim;
//  - value_overflow: magnitudes whose scores (|scale| x D x max|q| x max|k|) or,
//    with backward, gradients could exceed float32's largest value, where every
//    kernel accumulates; a float64 reference would still be finite there.
std::optional<Error> check_attention_values(const AttentionShape& shape, const AttentionInputs& inputs, int64_t q_len,
                                            int64_t kv_len);

// The documented deterministic data generator of `data: {"seed": N}` case files:
// splitmix64 from `seed`, each value uniform in [-1, 1) from the top 53 bits,
// filling q, k, v, then d_o (when backward) in row-major order, each value then
// rounded to the problem's dtype.
AttentionInputs generate_inputs(const AttentionProblem& problem, uint64_t seed);

}  // namespace attn_oracle::model
