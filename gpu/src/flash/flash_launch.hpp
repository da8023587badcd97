// flash_launch.hpp: the host entry points of the tensor-core (CuTe) attention
// kernels, for attention_device.cu, which owns the buffers, the fills and the
// timing. Plain C++17.
#pragma once

#include <cstdint>
#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"

namespace attn_oracle::gpu::flash {

// Why this build has no CuTe kernels (a CUDA build without the CUTLASS headers,
// cmake/AttnOracleCutlass.cmake: flash_unavailable.cpp), nullptr when it has them.
const char* missing();

// Whether the kernels are instantiated for (dtype, head dim): fp16 / bf16 x 64, 128,
// 256 (a development build with ATTN_FLASH_DEV_DIM: bf16 at that head dim alone).
bool instantiated(int dtype, int head_dim);

// Query rows per forward block at this head dim: the tile of the q-tile prefix.
int forward_block_m(int head_dim, FlashArch arch = FlashArch::sm80);

// Queues the forward over `q_tiles` blocks per head; q_tile_prefix (device, [docs + 1])
// counts the forward_block_m tiles before each document. o and lse must already
// hold 0 and -inf where no document is. False with `failure` on a launch failure.
bool forward(const AttentionFwdParams& p, const int64_t* q_tile_prefix, int64_t q_tiles, std::string& failure);

// The Hopper forward (flash_fwd_sm90.cu, sm_90a: a device of compute capability
// 9.0 only), as `forward` on forward_block_m(head_dim, FlashArch::sm90) tiles, for
// problems it fits: token counts TMA's 32-bit coordinates address, at least one
// query token and one key token.
bool forward_sm90_fits(const AttentionFwdParams& p);
bool forward_sm90(const AttentionFwdParams& p, const int64_t* q_tile_prefix, int64_t q_tiles, std::string& failure);

// Backward tiles (flash_tile.hpp): keys per dK/dV block, query rows per dQ block.
int backward_kv_block(int head_dim);
int backward_q_block(int head_dim);

// Where the backward's blocks are: prefixes (device, [docs + 1]) of the documents'
// backward_kv_block tiles of cu_seqlens_kv and backward_q_block tiles of cu_seqlens_q.
struct BackwardGrid {
  const int64_t* kv_block_prefix = nullptr;
  int64_t kv_blocks = 0;
  const int64_t* q_block_prefix = nullptr;
  int64_t q_blocks = 0;
};

// Queues the backward: delta = rowsum(dO * O) into p.delta, dK and dV, then dQ
// (flash_tile.hpp), deterministic: no atomics, every output summed by one block in a
// fixed order. dq, dk and dv must already hold 0 where no document is.
bool backward(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure);

// The dK/dV kernel alone (flash_bwd_dkdv.cu), for backward.
bool backward_dkdv(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure);

// delta = rowsum(dO * O) alone (flash_bwd_dq.cu), the first step of both backwards.
bool backward_delta(const AttentionBwdParams& p, std::string& failure);

// The Hopper backward (flash_bwd_sm90.cu, sm_90a), as `backward` on the same grid,
// for what it fits: forward_sm90_fits's token counts (every head dim it instantiates).
bool backward_sm90_fits(const AttentionFwdParams& p);
bool backward_sm90(const AttentionBwdParams& p, const BackwardGrid& grid, std::string& failure);

}  // namespace attn_oracle::gpu::flash
