// metadata_cuda.cpp: the metadata entry point of the `cuda` backend: validation of
// shapes on the host (prepare_batch), the token-parallel kernels on the device
// (metadata_stream_kernels.cu), and the first row error turned into the same Error
// the twin gives. Checked against the twin by tests/metadata_twin_test.cpp and
// against the reference by the metadata properties, on a device.
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/metadata_device.hpp"

namespace attn_oracle::gpu {

bool cuda_available(std::string* device_name) { return device_present(device_name); }

std::string cuda_arch() {
  std::string arch;
  device_present(nullptr, &arch);
  return arch;
}

Expected<Metadata> metadata_cuda(const PackedBatch& batch) {
  if (!device_present(nullptr)) return Error{ErrorCode::unsupported, "no CUDA device on this machine"};
  auto prepared = prepare_batch(batch);
  if (!prepared) return prepared.error();
  const MetadataParams& p = prepared->params;
  DeviceMetadataOutputs out;
  const InputSizes sizes{batch.q.segment_ids.data.size(), batch.q.segment_pos.data.size(),
                         batch.kv.segment_ids.data.size(), batch.kv.segment_pos.data.size()};
  if (!metadata_stream_on_device(p, sizes, out)) return Error{ErrorCode::unsupported, "CUDA failure: " + out.failure};
  if (out.error_row >= 0) return row_error_to_error(p, out.error_row, out.error);
  Metadata md;
  md.extra = prepared->extra;
  md.batch = p.batch;
  md.max_segments = p.max_segments;
  md.q_seqlens = std::move(out.q_seqlens);
  md.kv_seqlens = std::move(out.kv_seqlens);
  md.q_offsets = std::move(out.q_offsets);
  md.kv_offsets = std::move(out.kv_offsets);
  md.cu_seqlens_q = std::move(out.cu_seqlens_q);
  md.cu_seqlens_kv = std::move(out.cu_seqlens_kv);
  md.ragged_offsets_q = std::move(out.ragged_offsets_q);
  md.ragged_offsets_kv = std::move(out.ragged_offsets_kv);
  return md;
}

}  // namespace attn_oracle::gpu
