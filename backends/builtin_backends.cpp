// builtin_backends.cpp: the backends this build ships, behind the seam:
//   reference  the float64 explicit-mask oracle (properties/)
//   cpu        the CPU twins of the production algorithms (gpu/, run on the host)
//   cuda       the CUDA kernels; registered only when a device is present
#include "attn_oracle/backend.hpp"
#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle {
namespace {

class CpuTwinBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "cpu"; }
  std::string version() const override { return "CPU twins of the gpu/ kernels"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_twin(batch); }
};

class CudaBackend final : public Backend, MetadataCapability {
 public:
  CudaBackend() { gpu::cuda_available(&device_); }
  std::string name() const override { return "cuda"; }
  std::string version() const override { return "CUDA kernels on " + device_; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return gpu::metadata_cuda(batch); }

 private:
  std::string device_;
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
