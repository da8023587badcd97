// kv_buffer_device.hpp: the CUDA side of the shared K/V buffer (docs/semantics.md#3-metadata)
// as plain C++17, so that nvcc compiles kv_buffer_kernels.cu without the C++20
// data-model headers. The host wrapper (kv_buffer_cuda.cpp) validates and
// converts; each call uploads, runs one kernel family, downloads (the seam holds
// the buffers on the host). Checked by the kv_buffer properties on the `cuda`
// backend when a device is present; without one, only by compiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn_oracle::gpu {

struct DeviceMicroSequencePlan {
  int64_t begin = 0, end = 0, first_document_begin = 0;
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k, q_document, q_position, kv_document, kv_position;
};

// Token -> document table (one thread per document), then the plan of
// micro-sequence `index` (one thread per kv token and per boundary).
bool kv_plan_on_device(const std::vector<int64_t>& doc_starts, int64_t micro_seq_tokens, int64_t index,
                       DeviceMicroSequencePlan& out, std::string& failure);

// buffer[begin * row, ...) = slice, one thread per element; the kernel re-checks
// the bounds and writes nothing (returns false, "out of bounds") past the buffer.
bool kv_write_slice_on_device(int64_t begin, const std::vector<float>& slice, std::vector<float>& buffer, int64_t row,
                              std::string& failure);

// grad rows [first, first + len) += (dk, dv), one thread per element, fp32.
bool kv_accumulate_on_device(int64_t first, const std::vector<float>& dk, const std::vector<float>& dv,
                             std::vector<float>& grad, int64_t row_kv, std::string& failure);

}  // namespace attn_oracle::gpu
