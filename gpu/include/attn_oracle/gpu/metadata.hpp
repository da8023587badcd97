// metadata.hpp: host entry points of the O(T) metadata algorithm
// (docs/semantics.md#3-metadata): the CPU twin, and the CUDA kernels when this build has CUDA.
// Both return exactly the reference's integers and error codes; the properties
// of properties/metadata_properties.cpp check that on every backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/gpu/metadata_params.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::gpu {

// Whole-input checks (ranks, shapes, broadcast) and the params that address the
// batch in place: no copy of ids or positions, extra dims by strides.
struct PreparedBatch {
  MetadataParams params;  // input pointers set; outputs not yet
  Shape extra;            // broadcast extra dims
};
Expected<PreparedBatch> prepare_batch(const PackedBatch& batch);

// The first row error as an Error naming side, row, token and values.
Error row_error_to_error(const MetadataParams& p, int64_t row, const RowError& e);

// The CPU twin of the token-parallel kernels (metadata_tokens.hpp): their steps in loops.
Expected<Metadata> metadata_twin(const PackedBatch& batch);

// Peak scratch bytes metadata_twin uses for a batch (row keys, runs, tables, hash, slots).
int64_t metadata_twin_scratch_bytes(const PackedBatch& batch);

// CUDA: present when compiled with CUDA; fails with `unsupported` without a device.
bool cuda_available(std::string* device_name = nullptr);
// The first device's architecture, "sm_90" (compute capability 9.0), or "" without a device:
// what the `arch=` entries of a known-failure list match (Backend::arch()).
std::string cuda_arch();
Expected<Metadata> metadata_cuda(const PackedBatch& batch);  // the token-parallel kernels (`cuda`)

}  // namespace attn_oracle::gpu
