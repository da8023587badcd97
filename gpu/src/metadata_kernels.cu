// metadata_kernels.cu: the metadata algorithm on the GPU. The row functions of
// metadata_row.hpp run one row per thread (rows across blocks); CUB's exclusive
// scans over rows place each row's documents; a second kernel compacts.
// The CPU twin (metadata_twin.cpp) runs the same row functions in a loop, so the
// integers of both are identical; the properties compare both with the reference.
#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include "device_array.cuh"
#include "event_timer.cuh"

#include "attn_oracle/gpu/metadata_device.hpp"
#include "attn_oracle/gpu/metadata_row.hpp"

namespace attn_oracle::gpu {
namespace {

constexpr int kRowsPerBlock = 128;

__global__ void metadata_rows_kernel(MetadataParams p) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (row >= p.rows) return;
  metadata_row(p, row, p.q_runs + row * p.max_segments, p.kv_runs + row * p.max_segments,
               p.seen_large + row * p.large_capacity);
}

__global__ void compact_rows_kernel(CompactionParams c) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (row < c.rows) compact_row(c, row);
}


void exclusive_scan(const int64_t* in, int64_t* out, int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n);
  DeviceArray<char> temp(bytes);
  cub::DeviceScan::ExclusiveSum(temp.ptr, bytes, in, out, n);
}

// Benchmarks only (timing_reps > 0): the row kernel, the three scans (temp storage
// allocated once, outside the timed region) and the compaction, against a
// device-to-device copy of the four input arrays, each the median of `reps`.
void time_metadata(const MetadataParams& p, const CompactionParams& c, const InputSizes& sizes, int reps,
                   DeviceMetadataOutputs& out) {
  const unsigned blocks = static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, p.row_docs, const_cast<int64_t*>(c.doc_base), p.rows);
  DeviceArray<char> temp(bytes);
  out.kernels_ms = median_event_ms(reps, [&] {
    metadata_rows_kernel<<<blocks, kRowsPerBlock>>>(p);
    size_t b = bytes;
    cub::DeviceScan::ExclusiveSum(temp.ptr, b, p.row_docs, const_cast<int64_t*>(c.doc_base), p.rows);
    cub::DeviceScan::ExclusiveSum(temp.ptr, b, p.row_q_tokens, const_cast<int64_t*>(c.q_token_base), p.rows);
    cub::DeviceScan::ExclusiveSum(temp.ptr, b, p.row_kv_tokens, const_cast<int64_t*>(c.kv_token_base), p.rows);
    compact_rows_kernel<<<blocks, kRowsPerBlock>>>(c);
    return cudaGetLastError() == cudaSuccess;
  });
  const size_t elems[4] = {sizes.q_ids, sizes.q_pos, sizes.kv_ids, sizes.kv_pos};
  const int64_t* from[4] = {p.q.ids, p.q.pos, p.kv.ids, p.kv.pos};
  DeviceArray<int64_t> to(elems[0] + elems[1] + elems[2] + elems[3]);
  out.copy_ms = median_event_ms(reps, [&] {
    int64_t* at = to.ptr;
    bool ok = true;
    for (int i = 0; i < 4; ++i) {
      ok &= cudaMemcpyAsync(at, from[i], elems[i] * sizeof(int64_t), cudaMemcpyDeviceToDevice) == cudaSuccess;
      at += elems[i];
    }
    return ok;
  });
  out.copy_bytes = 2.0 * sizeof(int64_t) * double(to.size);
}

bool fail(DeviceMetadataOutputs& out, const char* what) {
  out.failure = std::string(what) + ": " + cudaGetErrorString(cudaGetLastError());
  return false;
}

}  // namespace

bool device_present(std::string* name) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  cudaDeviceProp prop{};
  if (name && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) *name = prop.name;
  return true;
}

bool metadata_on_device(const MetadataParams& host_params, const InputSizes& sizes, DeviceMetadataOutputs& out,
                        int timing_reps) {
  MetadataParams p = host_params;
  const int64_t rows = p.rows, M = p.max_segments;
  DeviceArray<int64_t> q_ids(sizes.q_ids), q_pos(sizes.q_pos), kv_ids(sizes.kv_ids), kv_pos(sizes.kv_pos);
  q_ids.upload(p.q.ids), q_pos.upload(p.q.pos), kv_ids.upload(p.kv.ids), kv_pos.upload(p.kv.pos);
  p.q.ids = q_ids.ptr, p.q.pos = q_pos.ptr, p.kv.ids = kv_ids.ptr, p.kv.pos = kv_pos.ptr;

  DeviceArray<int64_t> q_seqlens(rows * M), kv_seqlens(rows * M), q_offsets(rows * (M + 1)), kv_offsets(rows * (M + 1));
  DeviceArray<RowError> errors(rows);
  DeviceArray<int64_t> row_docs(rows), row_q(rows), row_kv(rows);
  DeviceArray<DocRun> q_runs(rows * M), kv_runs(rows * M);
  DeviceArray<int32_t> large(rows * p.large_capacity);
  if (!large.ok() || !q_runs.ok() || !kv_runs.ok() || !q_offsets.ok() || !q_ids.ok()) return fail(out, "allocation");
  p.q_seqlens = q_seqlens.ptr, p.kv_seqlens = kv_seqlens.ptr, p.q_offsets = q_offsets.ptr, p.kv_offsets = kv_offsets.ptr;
  p.errors = errors.ptr, p.row_docs = row_docs.ptr, p.row_q_tokens = row_q.ptr, p.row_kv_tokens = row_kv.ptr;
  p.q_runs = q_runs.ptr, p.kv_runs = kv_runs.ptr, p.seen_large = large.ptr;

  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows > 0) metadata_rows_kernel<<<blocks, kRowsPerBlock>>>(p);
  if (cudaDeviceSynchronize() != cudaSuccess) return fail(out, "metadata_rows_kernel");
  const std::vector<RowError> host_errors = errors.download();
  for (int64_t r = 0; r < rows; ++r)
    if (host_errors[r].code >= 0) {
      out.error_row = r;
      out.error = host_errors[r];
      return true;
    }

  DeviceArray<int64_t> doc_base(rows), q_base(rows), kv_base(rows);
  exclusive_scan(row_docs.ptr, doc_base.ptr, rows);
  exclusive_scan(row_q.ptr, q_base.ptr, rows);
  exclusive_scan(row_kv.ptr, kv_base.ptr, rows);
  int64_t docs = 0;
  if (rows > 0) {
    int64_t last_base = 0, last_docs = 0;
    cudaMemcpy(&last_base, doc_base.ptr + rows - 1, sizeof(int64_t), cudaMemcpyDeviceToHost);
    cudaMemcpy(&last_docs, row_docs.ptr + rows - 1, sizeof(int64_t), cudaMemcpyDeviceToHost);
    docs = last_base + last_docs;
  }
  DeviceArray<int64_t> cu_q(docs + 1), cu_kv(docs + 1), ragged_q(docs + 1), ragged_kv(docs + 1);
  CompactionParams c{q_offsets.ptr, q_seqlens.ptr, kv_offsets.ptr, kv_seqlens.ptr, doc_base.ptr, q_base.ptr, kv_base.ptr,
                     rows, M, p.q.len, p.kv.len, docs, cu_q.ptr, cu_kv.ptr, ragged_q.ptr, ragged_kv.ptr};
  if (rows > 0) compact_rows_kernel<<<blocks, kRowsPerBlock>>>(c);
  if (cudaDeviceSynchronize() != cudaSuccess) return fail(out, "compact_rows_kernel");

  out.q_seqlens = q_seqlens.download(), out.kv_seqlens = kv_seqlens.download();
  out.q_offsets = q_offsets.download(), out.kv_offsets = kv_offsets.download();
  out.cu_seqlens_q = cu_q.download(), out.cu_seqlens_kv = cu_kv.download();
  out.ragged_offsets_q = ragged_q.download(), out.ragged_offsets_kv = ragged_kv.download();
  if (rows == 0) out.cu_seqlens_q = out.cu_seqlens_kv = out.ragged_offsets_q = out.ragged_offsets_kv = {0};
  if (timing_reps > 0 && rows > 0) time_metadata(p, c, sizes, timing_reps, out);
  return true;
}

}  // namespace attn_oracle::gpu
