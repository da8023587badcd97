// reference_kv_buffer.cpp: the reference backend's K/V buffer capability
// (docs/semantics.md#3-metadata): the float64 steps of kv_buffer.hpp behind the seam. Its stream is
// the reference's own micro-sequence streaming, so the properties that compare a
// stream with the whole-sequence oracle check the reference against itself too.
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"

namespace attn_oracle::inline cases {
namespace {

class ReferenceKvBuffer final : public KvBufferCapability {
 public:
  Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& problem, int64_t i) override {
    return ref::micro_sequence_metadata(problem, i);
  }
  std::optional<Error> write_slice(const KvBufferProblem& problem, int64_t i, const std::vector<double>& slice,
                                   std::vector<double>& buffer) override {
    return ref::kv_buffer_write_slice(problem, i, slice, buffer);
  }
  Expected<AttentionResult> attend(const KvBufferProblem& problem, int64_t i, const AttentionInputs& micro,
                                   const std::vector<double>& buffer, std::vector<double>* grad_buffer) override {
    return ref::kv_buffer_attend(problem, i, micro, buffer, grad_buffer);
  }
  Expected<AttentionResult> stream(const KvBufferProblem& problem, const AttentionInputs& inputs) override {
    return ref::kv_buffer_streaming(problem, inputs);
  }
};

}  // namespace

KvBufferCapability& reference_kv_buffer() {
  static ReferenceKvBuffer instance;
  return instance;
}

}  // namespace attn_oracle::cases
