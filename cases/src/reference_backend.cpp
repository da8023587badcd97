// reference_backend.cpp: the float64 oracle behind the backend seam, so that the
// properties can be run on the reference itself (self-consistency) and so that
// `attn-oracle eval --backend reference` prints ground truth. It also writes into
// caller-owned buffers (compute, then copy), so the guard-band property runs on it.
#include <algorithm>

#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/seam/context_parallel.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"

namespace attn_oracle::inline cases {
namespace {

class ReferenceBackend final : public Backend, MetadataCapability, AttentionCapability, SmallSeqCapability {
 public:
  std::string name() const override { return "reference"; }
  std::string version() const override { return "float64 explicit-mask oracle"; }
  MetadataCapability* metadata() override { return this; }
  AttentionCapability* attention() override { return this; }
  SmallSeqCapability* small_seq() override { return this; }
  ShardingCapability* sharding() override { return &sharding_; }
  ContextParallelCapability* context_parallel() override { return &context_parallel_; }
  KvBufferCapability* kv_buffer() override { return &reference_kv_buffer(); }

  Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  Expected<AttentionResult> attention(const AttentionProblem& problem,
                                      const AttentionInputs& inputs) override {
    return ref::attention_dense_masked(problem, inputs);
  }
  bool token_level_mask() const override { return true; }

  Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return ref::small_seq(problem, inputs);
  }

  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    Expected<AttentionResult> r = ref::attention_dense_masked(problem, inputs);
    if (!r) return r.error();
    auto copy = [](const std::vector<double>& from, double* to) {
      if (to) std::copy(from.begin(), from.end(), to);
    };
    copy(r->o, out.o);
    copy(r->lse, out.lse);
    if (r->grads) {
      copy(r->grads->dq, out.dq);
      copy(r->grads->dk, out.dk);
      copy(r->grads->dv, out.dv);
    }
    return std::nullopt;
  }

 private:
  // Devices run the dense reference, which realises the token-level mask on any input.
  SimulatedSharding sharding_{static_cast<AttentionCapability&>(*this)};
  // Every rank runs the reference's metadata and its dense attention, whole.
  SimulatedContextParallel context_parallel_{static_cast<AttentionCapability&>(*this),
                                             static_cast<MetadataCapability&>(*this)};
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

void register_reference_backend() {
  static const bool once = BackendRegistry::instance().add("reference", make_reference_backend);
  (void)once;
}

}  // namespace attn_oracle::cases
