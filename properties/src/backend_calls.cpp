// backend_calls.cpp: see backend_calls.hpp.
#include "attn_oracle/properties/backend_calls.hpp"

#include <chrono>

#include "attn_oracle/properties/property_check.hpp"

namespace attn_oracle::inline properties {
namespace {

// Adds the time from its construction to its end (an exception included) to the record's backend_seconds.
class BackendStopwatch {
 public:
  explicit BackendStopwatch(CheckRecord& record) : record_(record) {}
  BackendStopwatch(const BackendStopwatch&) = delete;
  BackendStopwatch& operator=(const BackendStopwatch&) = delete;
  ~BackendStopwatch() {
    record_.backend_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  CheckRecord& record_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void decline_if(const std::optional<std::string>& reason) {
  if (reason) decline_case(*reason);
}

}  // namespace

void require_metadata_takes(Backend& backend, const PackedBatch& batch) { decline_if(metadata_declines(backend, batch)); }

Expected<Metadata> call_metadata(Backend& backend, const PackedBatch& batch, CheckRecord& record) {
  require_metadata_takes(backend, batch);
  Expected<Metadata> md = [&] {
    BackendStopwatch timed(record);
    return backend.metadata()->metadata(batch);
  }();
  if (!md) decline_if_unsupported(md.error());
  return md;
}

void require_attention_takes(Backend& backend, const AttentionProblem& problem) {
  decline_if(attention_declines(backend, problem));
}

Expected<AttentionResult> call_attention(Backend& backend, const AttentionProblem& problem,
                                         const AttentionInputs& inputs, CheckRecord& record) {
  require_attention_takes(backend, problem);
  BackendStopwatch timed(record);
  return backend.attention()->attention(problem, inputs);
}

std::optional<Error> call_attention_into(Backend& backend, const AttentionProblem& problem,
                                         const AttentionInputs& inputs, const AttentionCapability::Buffers& buffers,
                                         CheckRecord& record) {
  require_attention_takes(backend, problem);
  BackendStopwatch timed(record);
  return backend.attention()->attention_into(problem, inputs, buffers);
}

void require_small_seq_takes(Backend& backend, const AttentionProblem& problem) {
  decline_if(small_seq_declines(backend, problem));
}

void require_inside_domain(Backend& backend, const AttentionProblem& problem) { decline_if(domain_declines(backend, problem)); }

Expected<SmallSeqResult> call_small_seq(Backend& backend, const AttentionProblem& problem,
                                        const AttentionInputs& inputs, CheckRecord& record) {
  require_small_seq_takes(backend, problem);
  BackendStopwatch timed(record);
  return backend.small_seq()->small_seq(problem, inputs);
}

void require_kv_buffer_takes(Backend& backend, const KvBufferProblem& problem) {
  decline_if(kv_buffer_declines(backend, problem));
}

void require_sharding_takes(Backend& backend, const Sharding& sharding, const ShardedShapes& shapes,
                            const AttentionProblem& problem) {
  decline_if(sharding_declines(backend, sharding, shapes, &problem));
}

void require_context_parallel_takes(Backend& backend, const CpLayout& layout, const AttentionProblem& problem,
                                    bool layout_sizes) {
  decline_if(context_parallel_declines(backend, layout, problem, layout_sizes));
}

}  // namespace attn_oracle::properties
