// cudnn_backend.hpp: the `cudnn` backend (cuDNN SDPA through the cuDNN frontend,
// docs/semantics.md#11-where-each-concept-lives-in-the-code), registered by
// register_builtin_backends only when this build has it (ATTN_ORACLE_CUDNN,
// cmake/AttnOracleCudnn.cmake) and a CUDA device is present. Without either,
// cudnn_backend_unavailable.cpp says why.
#pragma once

#include <string>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline backends {

// Adds `cudnn` to the registry when it can run here.
void register_cudnn_backend(BackendRegistry& registry);

// Why `cudnn` is absent on this machine or in this build, or "".
std::string cudnn_backend_note();

}  // namespace attn_oracle::backends
