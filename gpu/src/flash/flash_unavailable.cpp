// flash_unavailable.cpp: the CuTe kernels' entry points in a CUDA build without
// the CUTLASS headers (cmake/AttnOracleCutlass.cmake says why they are missing).
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "flash/flash_launch.hpp"

namespace attn_oracle::gpu::flash {
namespace {
const char* const kMissing = "this build has no CuTe kernels (the CUTLASS headers were not found at configure time)";
}

const char* missing() { return kMissing; }

bool instantiated(int, int) { return false; }

int forward_block_m(int head_dim, FlashArch arch) { return flash_forward_tile(head_dim, arch).block_m; }
int backward_kv_block(int head_dim) { return flash_dkdv_tile(head_dim).block_n; }
int backward_q_block(int head_dim) { return flash_dq_tile(head_dim).block_m; }

bool forward(const AttentionFwdParams&, const int64_t*, int64_t, std::string& failure) {
  failure = kMissing;
  return false;
}

bool forward_sm90_fits(const AttentionFwdParams&) { return false; }

bool forward_sm90(const AttentionFwdParams&, const int64_t*, int64_t, std::string& failure) {
  failure = kMissing;
  return false;
}

bool backward_sm90_fits(const AttentionFwdParams&) { return false; }

bool backward_sm90(const AttentionBwdParams&, const BackwardGrid&, std::string& failure) {
  failure = kMissing;
  return false;
}

bool backward_delta(const AttentionBwdParams&, std::string& failure) {
  failure = kMissing;
  return false;
}

bool backward(const AttentionBwdParams&, const BackwardGrid&, std::string& failure) {
  failure = kMissing;
  return false;
}

bool backward_dkdv(const AttentionBwdParams&, const BackwardGrid&, std::string& failure) {
  failure = kMissing;
  return false;
}

}  // namespace attn_oracle::gpu::flash
