// device_array.cuh: a device buffer that frees itself (sizes in elements), shared
// by the host sides of the metadata and attention kernels. Every copy reports
// failure instead of throwing, so the wrappers turn it into an Error.
#pragma once

#include <cuda_runtime.h>

#include <vector>

namespace attn_oracle::gpu {

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t size = 0;
  explicit DeviceArray(size_t n) : size(n) {
    if (n > 0 && cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  bool ok() const { return size == 0 || ptr != nullptr; }

  bool upload(const T* host) {
    return size == 0 || cudaMemcpy(ptr, host, size * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  template <class U>
  bool upload(const std::vector<U>& host) {
    static_assert(sizeof(U) == sizeof(T), "upload of a different element size");
    return upload(reinterpret_cast<const T*>(host.data()));
  }
  template <class U>
  bool download(std::vector<U>& host) const {
    static_assert(sizeof(U) == sizeof(T), "download into a different element size");
    host.resize(size);
    return size == 0 || cudaMemcpy(host.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  std::vector<T> download() const {
    std::vector<T> out;
    download(out);
    return out;
  }
  bool zero() { return size == 0 || cudaMemsetAsync(ptr, 0, size * sizeof(T)) == cudaSuccess; }
};

}  // namespace attn_oracle::gpu
