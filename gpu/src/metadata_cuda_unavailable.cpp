// metadata_cuda_unavailable.cpp: the CUDA entry points of a build without CUDA.
#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle::gpu {

bool cuda_available(std::string*) { return false; }
std::string cuda_arch() { return ""; }

Expected<Metadata> metadata_cuda(const PackedBatch&) {
  return Error{ErrorCode::unsupported, "this build has no CUDA (configure with nvcc present)"};
}

}  // namespace attn_oracle::gpu
