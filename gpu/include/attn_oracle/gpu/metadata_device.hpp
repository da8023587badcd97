// metadata_device.hpp: the CUDA side of the metadata algorithm (the kernels of
// metadata_stream_kernels.cu) as plain C++17 (no data-model headers), so that nvcc
// compiles it without C++20. The host wrapper (metadata_cuda.cpp) turns the
// outputs into an Expected<Metadata>.
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
  // timing_reps > 0 (benchmarks): medians of the enqueued kernels, of the same
  // enqueue captured once and replayed as a CUDA graph, and of a device-to-device
  // copy of the four input arrays, and that copy's bytes read plus written.
  float kernels_ms = 0.0f, graph_ms = 0.0f, copy_ms = 0.0f;
  double copy_bytes = 0.0;
};

// Element counts of the four host input arrays the params point at.
struct InputSizes {
  size_t q_ids, q_pos, kv_ids, kv_pos;
};

// Whether this machine has a CUDA device; its name into `name` when one is given.
bool device_present(std::string* name, std::string* arch = nullptr);  // arch: "sm_90"

// ------------------------------------------------------------------ the kernels on a stream
// Asynchronous on a stream, nothing synchronises with the host inside: the caller
// gives device inputs (the params' ids / pos), output arrays and a workspace of
// metadata_workspace_bytes(p); the number of documents and the first row error
// stay on the device until metadata_read_status asks for them.

// Where the compacted outputs go; each array holds metadata_max_documents(p) + 1.
struct MetadataStreamOutputs {
  int64_t* q_seqlens = nullptr;   // [rows, M]
  int64_t* kv_seqlens = nullptr;  // [rows, M]
  int64_t* q_offsets = nullptr;   // [rows, M + 1]
  int64_t* kv_offsets = nullptr;  // [rows, M + 1]
  int64_t* cu_seqlens_q = nullptr, *cu_seqlens_kv = nullptr;
  int64_t* ragged_offsets_q = nullptr, *ragged_offsets_kv = nullptr;
};

// What the caller asks for after the enqueue: documents written, or the error.
struct MetadataStatus {
  int64_t documents = 0;
  int64_t error_row = -1;  // first row with an error, -1 when none
  RowError error;
};

// A row holds at most min(M, Tq, Tkv) documents.
int64_t metadata_max_documents(const MetadataParams& p);
size_t metadata_workspace_bytes(const MetadataParams& p);
// Queues every kernel on `stream` (a cudaStream_t, 0 = the default stream);
// returns a launch failure's text, empty when queued.
std::string metadata_enqueue(const MetadataParams& device_params, const MetadataStreamOutputs& out, void* workspace,
                             size_t workspace_bytes, void* stream);
// Waits for `stream` and copies the status back; false on a CUDA failure.
bool metadata_read_status(const void* workspace, void* stream, MetadataStatus& status, std::string& failure);

// Uploads, runs the kernels and downloads (metadata_cuda's body); returns false on a
// CUDA failure. timing_reps > 0 (benchmarks): also the timings of the outputs.
bool metadata_stream_on_device(const MetadataParams& host_params, const InputSizes& sizes, DeviceMetadataOutputs& out,
                               int timing_reps = 0);

}  // namespace attn_oracle::gpu
