// reference/kv_buffer.hpp: the float64 references of the shared K/V buffer
// (docs/semantics.md#3-metadata; the problem and its metadata are attn_oracle/model/kv_buffer.hpp).
// Tested by tests/kv_buffer_test.cpp.
#pragma once

#include "attn_oracle/model/kv_buffer.hpp"

namespace attn_oracle::ref {

Expected<MicroSequenceMetadata> micro_sequence_metadata(const KvBufferProblem& problem, int64_t i);

// The contract: o, lse and (backward) dq, dk, dv of the whole sequence.
Expected<AttentionResult> kv_buffer_whole_sequence(const KvBufferProblem& problem,
                                                   const AttentionInputs& inputs);

// Writes micro-sequence i's slice [end - begin, 2, Hkv, D] into buffer[begin, end).
std::optional<Error> kv_buffer_write_slice(const KvBufferProblem& problem, int64_t i,
                                           const std::vector<double>& slice, std::vector<double>& buffer);

// One micro-sequence against the buffer view [fdb, end): `micro` holds q and
// (backward) d_o of its tokens, [end - begin, Hq, D]. Returns o, lse [Hq, end - begin]
// and (backward) dq; dK, dV are added into grad_buffer [N, 2, Hkv, D] rows
// [fdb, end) (grad_buffer may be null for a forward).
Expected<AttentionResult> kv_buffer_attend(const KvBufferProblem& problem, int64_t i,
                                           const AttentionInputs& micro, const std::vector<double>& buffer,
                                           std::vector<double>* grad_buffer);

// Every micro-sequence's slice written and attended in order, backward in
// reverse; the result in the whole-sequence layouts (dk, dv read off the grad buffer).
Expected<AttentionResult> kv_buffer_streaming(const KvBufferProblem& problem, const AttentionInputs& inputs);

}  // namespace attn_oracle::ref
