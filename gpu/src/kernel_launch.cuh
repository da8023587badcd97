// kernel_launch.cuh: the host steps the attention kernels' launches share (the CuTe
// kernels of flash/, the small-seq kernels): the dynamic shared-memory limit raised,
// the launch on the default stream, its error checked, a CUDA error into the entry
// point's failure message.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace attn_oracle::gpu {

// `failure` = "what: CUDA's error string"; false, so that a caller returns it.
inline bool cuda_failure(std::string& failure, const std::string& what, cudaError_t e = cudaGetLastError()) {
  failure = what + ": " + cudaGetErrorString(e);
  return false;
}

// Launches `kernel` on the default stream, the dynamic shared-memory limit raised
// first where smem_bytes is past CUDA's default 48 KiB (up to it, the call would
// change nothing); false with `failure` ("name: ...") on either error.
template <class... Params, class... Args>
bool launch_kernel(void (*kernel)(Params...), dim3 grid, int threads, size_t smem_bytes, const char* name,
                   std::string& failure, const Args&... args) {
  if (smem_bytes > 48 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)) != cudaSuccess)
    return cuda_failure(failure, std::string(name) + ": shared memory attribute");
  kernel<<<grid, threads, smem_bytes>>>(args...);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_failure(failure, name, e);
  return true;
}

}  // namespace attn_oracle::gpu
