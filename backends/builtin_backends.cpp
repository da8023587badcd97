// builtin_backends.cpp: the backends this build ships, behind the seam:
//   reference  the float64 explicit-mask oracle (properties/)
//   cpu        the CPU twins of the production algorithms (gpu/, run on the host),
//              small-seq included
//   cuda       the CUDA kernels; registered only when a device is present
#include "attn_oracle/backend.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/small_seq.hpp"

namespace attn_oracle {
namespace {

gpu::AttentionOutputs outputs_of(const AttentionCapability::Buffers& b) {
  return gpu::AttentionOutputs{b.o, b.lse, b.dq, b.dk, b.dv};
}

class CpuTwinBackend final : public Backend, MetadataCapability, AttentionCapability, SmallSeqCapability {
 public:
  std::string name() const override { return "cpu"; }
  std::string version() const override { return "CPU twins of the gpu/ kernels"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_twin(batch); }

  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::attention_twin(problem, inputs);
  }
  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    return gpu::attention_twin_into(problem, inputs, outputs_of(out));
  }

  SmallSeqCapability* small_seq() override { return this; }
  Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::small_seq_twin(problem, inputs);
  }
};

class CudaBackend final : public Backend, MetadataCapability, AttentionCapability {
 public:
  CudaBackend() { gpu::cuda_available(&device_); }
  std::string name() const override { return "cuda"; }
  std::string version() const override { return "CUDA kernels on " + device_; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_cuda(batch); }

  AttentionCapability* attention() override { return this; }
  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    return gpu::attention_cuda_unsupported(problem);
  }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::attention_cuda(problem, inputs);
  }
  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    return gpu::attention_cuda_into(problem, inputs, outputs_of(out));
  }

  // Both capabilities have unsupported(AttentionProblem): this adapter tells them apart.
  class SmallSeq final : public SmallSeqCapability {
   public:
    std::optional<std::string> unsupported(const AttentionProblem& problem) override {
      return gpu::small_seq_cuda_unsupported(problem);
    }
    Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) override {
      return gpu::small_seq_cuda(problem, inputs);
    }
  };
  SmallSeqCapability* small_seq() override { return &small_seq_; }

 private:
  std::string device_;
  SmallSeq small_seq_;
};

}  // namespace

void register_builtin_backends() {
  static const bool once = [] {
    BackendRegistry& r = BackendRegistry::instance();
    r.add("reference", make_reference_backend);
    r.add("cpu", [] { return std::unique_ptr<Backend>(new CpuTwinBackend()); });
    if (gpu::cuda_available()) r.add("cuda", [] { return std::unique_ptr<Backend>(new CudaBackend()); });
    return true;
  }();
  (void)once;
}

std::string builtin_backends_note() {
  return gpu::cuda_available() ? "" : "cuda: not registered (no CUDA device on this machine, or a build without CUDA)";
}

}  // namespace attn_oracle
