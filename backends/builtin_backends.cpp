// builtin_backends.cpp: the production backends this build ships, behind the
// seam (production_backends.hpp):
//   cpu        the CPU twins of the production algorithms (gpu/, run on the host),
//              small-seq included
//   cpu-sm90   the same, the attention forward on the Hopper kernel's tiles
//   cuda       the CUDA kernels (token-parallel metadata, CuTe tensor-core attention,
//              small-seq, K/V buffer); registered only when a device is present
//   cuda-sm90  the same with Hopper's attention kernels (wgmma, TMA; sm_90a), only
//              when the first device is sm_90
//   cudnn      cuDNN SDPA (cudnn_backend.cpp); only in builds with cuDNN, with a device
#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/kv_buffer.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/small_seq.hpp"
#include "cudnn_backend.hpp"
#include "attn_oracle/seam/context_parallel.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"

namespace attn_oracle::inline backends {
namespace {

gpu::AttentionOutputs outputs_of(const AttentionCapability::Buffers& b) {
  return gpu::AttentionOutputs{b.o, b.lse, b.dq, b.dk, b.dv};
}

// The K/V buffer steps of gpu/kv_buffer.hpp on one device (twin or CUDA).
class GpuKvBuffer final : public KvBufferCapability {
 public:
  explicit GpuKvBuffer(gpu::KvDevice device) : device_(device) {}
  std::optional<std::string> unsupported(const KvBufferProblem& problem) override {
    if (device_ == gpu::KvDevice::cuda) return gpu::kv_buffer_cuda_unsupported(problem);
    return std::nullopt;
  }
  Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& problem, int64_t i) override {
    return gpu::kv_buffer_plan(problem, i, device_);
  }
  std::optional<Error> write_slice(const KvBufferProblem& problem, int64_t i, const std::vector<double>& slice,
                                   std::vector<double>& buffer) override {
    return gpu::kv_buffer_write_slice(problem, i, slice, buffer, device_);
  }
  Expected<AttentionResult> attend(const KvBufferProblem& problem, int64_t i, const AttentionInputs& micro,
                                   const std::vector<double>& buffer, std::vector<double>* grad_buffer) override {
    return gpu::kv_buffer_attend(problem, i, micro, buffer, grad_buffer, device_);
  }
  Expected<AttentionResult> stream(const KvBufferProblem& problem, const AttentionInputs& inputs) override {
    return gpu::kv_buffer_stream(problem, inputs, device_);
  }

 private:
  gpu::KvDevice device_;
};

// The name of a backend whose attention forward is `arch`'s kernel: sm80's is the plain one.
std::string arch_name(const char* base, gpu::FlashArch arch) {
  return arch == gpu::FlashArch::sm90 ? std::string(base) + "-sm90" : std::string(base);
}

class CpuTwinBackend final : public Backend, MetadataCapability, AttentionCapability, SmallSeqCapability {
 public:
  explicit CpuTwinBackend(gpu::FlashArch arch) : arch_(arch) {}
  std::string name() const override { return arch_name("cpu", arch_); }
  std::string version() const override {
    return arch_ == gpu::FlashArch::sm90 ? "CPU twins of the gpu/ kernels, the forward on the sm_90a kernel's tiles"
                                         : "CPU twins of the gpu/ kernels";
  }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_twin(batch); }

  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::attention_twin(problem, inputs, arch_);
  }
  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    return gpu::attention_twin_into(problem, inputs, outputs_of(out), arch_);
  }

  // The small-seq kernel and the K/V buffer's attention are the same for both
  // forwards: only the plain backend offers them, so they are not checked twice.
  SmallSeqCapability* small_seq() override { return arch_ == gpu::FlashArch::sm80 ? this : nullptr; }
  Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::small_seq_twin(problem, inputs);
  }

  KvBufferCapability* kv_buffer() override { return arch_ == gpu::FlashArch::sm80 ? &kv_buffer_ : nullptr; }
  ShardingCapability* sharding() override { return &sharding_; }
  ContextParallelCapability* context_parallel() override { return &context_parallel_; }

 private:
  gpu::FlashArch arch_;
  GpuKvBuffer kv_buffer_{gpu::KvDevice::twin};
  // Every simulated device runs the attention twin (index rule on trimmed runs).
  SimulatedSharding sharding_{static_cast<AttentionCapability&>(*this)};
  // Every rank runs the metadata twin and the attention twin, in blocks it represents.
  SimulatedContextParallel context_parallel_{static_cast<AttentionCapability&>(*this),
                                             static_cast<MetadataCapability&>(*this)};
};

class CudaBackend final : public Backend, MetadataCapability, AttentionCapability {
 public:
  explicit CudaBackend(gpu::FlashArch arch) : arch_(arch) { gpu::cuda_available(&device_); }
  std::string name() const override { return arch_name("cuda", arch_); }
  std::string version() const override {
    return (arch_ == gpu::FlashArch::sm90 ? "CUDA kernels (sm_90a attention) on " : "CUDA kernels on ") + device_;
  }
  std::string arch() const override { return gpu::cuda_arch(); }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_cuda(batch); }

  AttentionCapability* attention() override { return this; }
  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    return gpu::attention_cuda_unsupported(problem);
  }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    return gpu::attention_cuda(problem, inputs, arch_);
  }
  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    return gpu::attention_cuda_into(problem, inputs, outputs_of(out), arch_);
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
  SmallSeqCapability* small_seq() override { return arch_ == gpu::FlashArch::sm80 ? &small_seq_ : nullptr; }
  KvBufferCapability* kv_buffer() override { return arch_ == gpu::FlashArch::sm80 ? &kv_buffer_ : nullptr; }
  ContextParallelCapability* context_parallel() override { return &context_parallel_; }

 private:
  gpu::FlashArch arch_;
  std::string device_;
  SmallSeq small_seq_;
  GpuKvBuffer kv_buffer_{gpu::KvDevice::cuda};
  SimulatedContextParallel context_parallel_{static_cast<AttentionCapability&>(*this),
                                             static_cast<MetadataCapability&>(*this)};
};

}  // namespace

void register_production_backends() {
  static const bool once = [] {
    BackendRegistry& r = BackendRegistry::instance();
    using gpu::FlashArch;
    r.add("cpu", [] { return std::unique_ptr<Backend>(new CpuTwinBackend(FlashArch::sm80)); });
    r.add("cpu-sm90", [] { return std::unique_ptr<Backend>(new CpuTwinBackend(FlashArch::sm90)); });
    if (gpu::cuda_available()) {
      r.add("cuda", [] { return std::unique_ptr<Backend>(new CudaBackend(FlashArch::sm80)); });
      if (gpu::attention_cuda_sm90_available())
        r.add("cuda-sm90", [] { return std::unique_ptr<Backend>(new CudaBackend(FlashArch::sm90)); });
    }
    register_cudnn_backend(r);
    return true;
  }();
  (void)once;
}

std::string production_backends_note() {
  std::string note = gpu::cuda_available() ? "" : "cuda: not registered (no CUDA device on this machine, or a build without CUDA)";
  if (gpu::cuda_available() && !gpu::attention_cuda_sm90_available())
    note = "cuda-sm90: not registered (its kernels run on sm_90 alone; the device is " + gpu::cuda_arch() + ")";
  const std::string cudnn = cudnn_backend_note();
  if (!cudnn.empty()) note += (note.empty() ? "" : "; ") + cudnn;
  return note;
}

std::string production_device() {
  std::string device;
  return gpu::cuda_available(&device) ? device : "no device";
}

}  // namespace attn_oracle::backends
