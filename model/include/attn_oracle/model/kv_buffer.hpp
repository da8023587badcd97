// kv_buffer.hpp: the shared K/V buffer across micro-sequences (docs/semantics.md#3-metadata):
// the problem, its validation and the canonical per-micro-sequence metadata
// (data model); the float64 references it is judged by are named below.
//
// A sequence of documents (lengths L1, L2, ..., total N) is processed in
// micro-sequences of m tokens: micro-sequence i covers [i*m, min((i+1)*m, N)),
// so when m does not divide N the last one is shorter (ceil(N / m) in all).
// first_document_begin (fdb) is the start of the document that holds token i*m;
// micro-sequence i attends to buffer[fdb, end) with bottom-right causal alignment
// per document, so a document that began in an earlier micro-sequence sees its
// own earlier tokens and nothing before fdb is ever read or written.
//
// Canonical metadata of micro-sequence i, over the S documents that overlap it:
//   cu_seqlens_q [S+1]: 0 .. end - begin   (the documents' tokens inside [begin, end))
//   cu_seqlens_k [S+1]: 0 .. end - fdb     (the documents' tokens inside [fdb, end))
//   q_document / kv_document: 1..S per token of each range (renumbered per micro-sequence)
//   q_position / kv_position: the token's position inside its document
// A real stack emitted cu_seqlens_k[0] = fdb; this is the contract that rules it out.
//
// Tensors use the attention seam's layouts with one row (R = 1): q, d_o, o, dq
// [N, Hq, D]; k, v, dk, dv [N, Hkv, D]; lse [Hq, N]. The buffer itself is
// [N, 2, Hkv, D] (K then V per token), one per layer; its gradient likewise.
//
// References (attn_oracle/reference/kv_buffer.hpp):
//  - kv_buffer_whole_sequence: per-document causal attention over the whole
//    sequence, the dense masked reference on one packed row (the contract).
//  - micro_sequence_metadata: read off ref::metadata of the micro-sequence's
//    packed batch (q side [begin, end), kv side [fdb, end), true positions).
//  - kv_buffer_attend / kv_buffer_streaming: the micro-sequence steps in float64
//    (explicit mask on true positions against the narrowed buffer view), forward
//    in order and backward in reverse; equal to the whole sequence (tested).
//
// Validation order: doc_lengths (kv_buffer_document_length), micro_seq_tokens
// (kv_buffer_micro_seq_tokens), heads (bad_heads), tensor sizes (bad_tensor_shape),
// then a micro-sequence index or slice outside the buffer (kv_buffer_slice_out_of_bounds).
//
// Tested by tests/kv_buffer_test.cpp and the kv_buffer properties.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline model {

struct KvBufferProblem {
  std::vector<int64_t> doc_lengths;  // [docs], each >= 1; N = their sum
  int64_t micro_seq_tokens = 1;      // m >= 1
  AttentionShape shape;              // heads, head_dim, dtype, scale, backward
  bool operator==(const KvBufferProblem&) const = default;
};

struct KvBufferSizes {
  int64_t tokens = 0;          // N
  int64_t micro_sequences = 0; // ceil(N / m)
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t buffer_elems() const { return tokens * 2 * heads_kv * head_dim; }  // [N, 2, Hkv, D]
};

// Canonical metadata of one micro-sequence (see the file comment).
struct MicroSequenceMetadata {
  int64_t index = 0;
  int64_t begin = 0, end = 0;         // q tokens [begin, end)
  int64_t first_document_begin = 0;   // kv tokens [first_document_begin, end)
  std::vector<int64_t> cu_seqlens_q;  // [S+1], 0 .. end - begin
  std::vector<int64_t> cu_seqlens_k;  // [S+1], 0 .. end - first_document_begin
  std::vector<int64_t> q_document;    // [end - begin], 1..S
  std::vector<int64_t> q_position;    // [end - begin], position inside the document
  std::vector<int64_t> kv_document;   // [end - first_document_begin], 1..S
  std::vector<int64_t> kv_position;   // [end - first_document_begin]
  int64_t documents() const { return static_cast<int64_t>(cu_seqlens_q.size()) - 1; }
  bool operator==(const MicroSequenceMetadata&) const = default;
};

// Validates the problem and, when given, the whole-sequence tensors.
Expected<KvBufferSizes> validate_kv_buffer(const KvBufferProblem& problem,
                                           const AttentionInputs* inputs = nullptr);

// kv_buffer_slice_out_of_bounds unless 0 <= i < micro_sequences.
std::optional<Error> check_micro_sequence_index(const KvBufferSizes& sizes, int64_t i);

// The start of every document, then N: [docs + 1].
std::vector<int64_t> document_starts(const KvBufferProblem& problem);

// bad_tensor_shape unless `t` holds `tokens` rows of [2, Hkv, D] (a buffer or a slice).
std::optional<Error> check_buffer_size(const char* name, const std::vector<double>& t, int64_t tokens,
                                       const KvBufferSizes& sizes);

// [begin, end) of micro-sequence i (no validation).
struct TokenRange {
  int64_t begin = 0, end = 0;
};
TokenRange micro_sequence_range(const KvBufferProblem& problem, int64_t i);

// Whole-sequence attention as an AttentionProblem: one row of N tokens, ids
// 1..docs, positions from 0 in each document, causal, M = docs.
AttentionProblem whole_sequence_problem(const KvBufferProblem& problem);

// `data: {"seed": N}` of kv_buffer case files: generate_inputs of the whole-sequence problem.
AttentionInputs generate_kv_buffer_inputs(const KvBufferProblem& problem, uint64_t seed);

// Rows [begin, end) of a [tokens, heads, D] tensor, and the K (part 0) or V
// (part 1) rows [begin, end) of a [N, 2, Hkv, D] buffer as [end - begin, Hkv, D].
std::vector<double> token_rows(const std::vector<double>& t, int64_t begin, int64_t end, int64_t heads,
                               int64_t dim);
std::vector<double> buffer_part(const std::vector<double>& buffer, int part, int64_t begin, int64_t end,
                                int64_t heads_kv, int64_t dim);
// The slice micro-sequence i writes: [end - begin, 2, Hkv, D] from k and v [N, Hkv, D].
std::vector<double> kv_slice_of(const KvBufferProblem& problem, int64_t i, const AttentionInputs& inputs);

}  // namespace attn_oracle::model
