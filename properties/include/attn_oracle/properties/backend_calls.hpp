// backend_calls.hpp: the one way a property reaches a backend. Each problem a
// property runs (the drawn one, and every transformed, permuted or sliced one)
// is first asked whether the backend takes it (seam/backend_takes.hpp: its
// declared domain, then its capability's `unsupported` hook): a problem it does
// not take is a decline with the reason, never a false failure. One helper per
// capability.
//
// Checked by tests/input_domain_test.cpp (a backend whose hook declines only
// what a transformed problem holds passes every property).
#pragma once

#include <optional>
#include <string>

#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/seam/backend_takes.hpp"

namespace attn_oracle::inline properties {

// The metadata, attention and small-seq calls add their time to the check's
// record (CheckRecord::backend_seconds), so that a run can say what a draw
// costs in the backend and what in the suite (the float64 oracle, the naive
// run, the checks). K/V-buffer and sharding steps are called directly and count
// as suite time.

// ---------------------------------------------------------------- metadata
// Declines the case unless the backend takes `batch`.
void require_metadata_takes(Backend& backend, const PackedBatch& batch);
// The backend's metadata, asked first; an `unsupported` answer is a decline too.
Expected<Metadata> call_metadata(Backend& backend, const PackedBatch& batch, CheckRecord& record);

// ---------------------------------------------------------------- attention
void require_attention_takes(Backend& backend, const AttentionProblem& problem);
Expected<AttentionResult> call_attention(Backend& backend, const AttentionProblem& problem,
                                         const AttentionInputs& inputs, CheckRecord& record);
std::optional<Error> call_attention_into(Backend& backend, const AttentionProblem& problem,
                                         const AttentionInputs& inputs, const AttentionCapability::Buffers& buffers,
                                         CheckRecord& record);

// ---------------------------------------------------------------- small-seq
void require_small_seq_takes(Backend& backend, const AttentionProblem& problem);
// The domain alone: for an invalid problem, which a small-seq hook may assume away.
void require_inside_domain(Backend& backend, const AttentionProblem& problem);
Expected<SmallSeqResult> call_small_seq(Backend& backend, const AttentionProblem& problem,
                                        const AttentionInputs& inputs, CheckRecord& record);

// ---------------------------------------------------------------- K/V buffer
// A K/V buffer problem is asked once: every step of the capability (metadata,
// writes, attends, the stream) then runs on that same problem.
void require_kv_buffer_takes(Backend& backend, const KvBufferProblem& problem);

// ---------------------------------------------------------------- sharding
// The unsharded problem is asked of the domain, the call of the hook.
void require_sharding_takes(Backend& backend, const Sharding& sharding, const ShardedShapes& shapes,
                            const AttentionProblem& problem);

// ---------------------------------------------------------------- context parallelism
// The layout's fields and the problem asked of the domain, then the hook.
// `layout_sizes` false: cp and stripe are not asked (an invalid draw's size is its point).
void require_context_parallel_takes(Backend& backend, const CpLayout& layout, const AttentionProblem& problem,
                                    bool layout_sizes = true);

}  // namespace attn_oracle::properties
