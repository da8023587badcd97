// metadata_device.hpp: the CUDA side of the metadata algorithm as plain C++17
// (no data-model headers), so that nvcc compiles it without C++20. The host
// wrapper (metadata_cuda.cpp) turns the outputs into an Expected<Metadata>.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/gpu/metadata_params.hpp"

namespace attn_oracle::gpu {

struct DeviceMetadataOutputs {
  std::vector<int64_t> q_seqlens, kv_seqlens, q_offsets, kv_offsets;  // per row
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_kv, ragged_offsets_q, ragged_offsets_kv;
  int64_t error_row = -1;  // first row with an error, -1 if none
  RowError error;
  std::string failure;     // a CUDA failure, empty on success
  // timing_reps > 0 (benchmarks): medians of the kernels (rows, scans, compaction)
  // and of a device-to-device copy of the four input arrays, and that copy's bytes
  // read plus written.
  float kernels_ms = 0.0f, copy_ms = 0.0f;
  double copy_bytes = 0.0;
};

// Element counts of the four host input arrays the params point at.
struct InputSizes {
  size_t q_ids, q_pos, kv_ids, kv_pos;
};

bool device_present(std::string* name);

// Copies the inputs to the device, runs the row kernel, CUB scans and the
// compaction kernel, and copies every output back. Returns false on a CUDA failure.
// timing_reps > 0: then times the kernels and the input copy (see the outputs).
bool metadata_on_device(const MetadataParams& host_params, const InputSizes& sizes,
                        DeviceMetadataOutputs& out, int timing_reps = 0);

}  // namespace attn_oracle::gpu
