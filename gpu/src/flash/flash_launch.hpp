// flash_launch.hpp: the host entry points of the tensor-core (CuTe) attention
// kernels, for attention_kernels.cu, which owns the buffers, the fills and the
// timing of both kernel families. Plain C++17.
#pragma once

#include <cstdint>
#include <string>

#include "attn_oracle/gpu/attention/attention_params.hpp"

namespace attn_oracle::gpu::flash {

// Whether this build has the CuTe kernels (CUTLASS headers were found).
bool built();

// Query rows per forward block at this head dim: the tile of the q-tile prefix.
int forward_block_m(int head_dim);

// Queues the forward over `q_tiles` blocks per head; q_tile_prefix (device, [docs + 1])
// counts the forward_block_m tiles before each document. o and lse must already
// hold 0 and -inf where no document is. False with `failure` on a launch failure.
bool forward(const AttentionFwdParams& p, const int64_t* q_tile_prefix, int64_t q_tiles, std::string& failure);

}  // namespace attn_oracle::gpu::flash
