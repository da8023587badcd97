// flash_unavailable.cpp: the CuTe kernels' entry points in a CUDA build without
// the CUTLASS headers (cmake/AttnOracleCutlass.cmake says why they are missing).
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "flash/flash_launch.hpp"

namespace attn_oracle::gpu::flash {

bool built() { return false; }

int forward_block_m(int head_dim) { return flash_forward_tile(head_dim).block_m; }

bool forward(const AttentionFwdParams&, const int64_t*, int64_t, std::string& failure) {
  failure = "this build has no CuTe kernels (the CUTLASS headers were not found at configure time)";
  return false;
}

}  // namespace attn_oracle::gpu::flash
