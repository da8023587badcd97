// reference_backend.cpp: the float64 oracle behind the backend seam, so that the
// properties can be run on the reference itself (self-consistency) and so that
// `attn-oracle eval --backend reference` prints ground truth.
#include "attn_oracle/backend.hpp"
#include "attn_oracle/reference_metadata.hpp"

namespace attn_oracle {
namespace {

class ReferenceBackend final : public Backend, MetadataCapability, AttentionCapability {
 public:
  std::string name() const override { return "reference"; }
  std::string version() const override { return "float64 explicit-mask oracle"; }
  MetadataCapability* metadata() override { return this; }
  AttentionCapability* attention() override { return this; }

  Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  Expected<AttentionResult> attention(const AttentionProblem& problem,
                                      const AttentionInputs& inputs) override {
    return ref::attention_dense_masked(problem, inputs);
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace attn_oracle
