// cudnn_support.hpp: what the `cudnn` backend declines before it asks cuDNN, per
// cuDNN version and compute capability, each with the reason. These are the
// documented limits of cuDNN SDPA (fp16/bf16 only, head dims, ragged offsets from
// Hopper on, versions with known bugs); whatever passes is then built as a graph,
// and the frontend's own verdict on that graph is final (cudnn_sdpa.hpp).
// Pure functions of their arguments: tested on the CPU by tests/cudnn_backend_rules_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attn_oracle/model/attention.hpp"
#include "cudnn_band.hpp"
#include "cudnn_plan.hpp"

namespace attn_oracle::inline backends::cudnn {

struct Platform {
  int64_t version = 0;  // cudnnGetVersion(): 91900 for 9.19.0
  int cc_major = 0, cc_minor = 0;
  std::string device;   // "NVIDIA H100 80GB HBM3"
};

// "9.19.0"
std::string version_string(int64_t version);

// A reason to decline (shape, band and layout on this platform), or nullopt.
std::optional<std::string> unsupported(const Platform& platform, const AttentionShape& shape, const Band& band,
                                       Layout layout);

// Ragged offsets are int64 from cuDNN 9.6 on, int32 before.
inline bool ragged_offsets_int64(const Platform& platform) { return platform.version >= 90600; }

}  // namespace attn_oracle::backends::cudnn
