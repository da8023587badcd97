// cudnn_sdpa.hpp: cuDNN SDPA forward and backward through the cuDNN frontend's
// graph API, on host arrays of 16-bit storage patterns laid out as a Plan says
// (cudnn_plan.hpp). The frontend's headers stay inside cudnn_sdpa.cpp; callers
// (the backend, the benchmarks) see only this.
//
// Graphs are built once per signature (layout, S, heads, head_dim, s_max, dtype,
// band, scale, backward) and cached with the frontend's verdict, so asking whether
// a problem is supported and then running it builds one graph.
// Checked by the conformance properties on the `cudnn` backend when a device is
// present; without one, only by compiling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "cudnn_band.hpp"
#include "cudnn_plan.hpp"
#include "cudnn_support.hpp"

namespace attn_oracle::inline backends::cudnn {

// cuDNN's version and the current device; version 0 and device "" when no CUDA
// device is present or libcudnn cannot be loaded.
const Platform& current_platform();

struct SdpaCall {
  Plan plan;
  AttentionShape shape;       // heads, head_dim, dtype (fp16 / bf16), scale, backward
  Band band;
  std::vector<uint16_t> q;    // [total_q, heads_q, head_dim] storage bits
  std::vector<uint16_t> k;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> v;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> d_o;  // [total_q, heads_q, head_dim]; backward only
  // > 0: after the checked run, execute the forward (and backward) graph this many
  // more times and report the median CUDA-event time of each (benchmarks only).
  int timing_reps = 0;
};

struct SdpaOutputs {
  std::vector<uint16_t> o;   // [total_q, heads_q, head_dim]; tokens of no document 0
  std::vector<float> lse;    // [heads_q, total_q]; -inf for tokens of no document
  std::vector<uint16_t> dq;  // backward only, in the input layouts
  std::vector<uint16_t> dk;
  std::vector<uint16_t> dv;
  float fwd_ms = 0.0f, bwd_ms = 0.0f;  // medians (timing_reps > 0)
  bool declined = false;     // the frontend rejected the graph: `failure` is its reason
  std::string failure;       // empty on success
};

// The frontend's reason to reject the graphs of this call's signature, or nullopt
// (builds and caches them; needs a device).
std::optional<std::string> graph_unsupported(const Plan& plan, const AttentionShape& shape, const Band& band);

// Uploads, zero-fills o and the gradients, runs the forward and, when
// shape.backward, the backward graph, downloads. False with out.failure otherwise.
bool sdpa_on_device(const SdpaCall& call, SdpaOutputs& out);

}  // namespace attn_oracle::backends::cudnn
