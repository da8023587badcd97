// small_seq_device.hpp: the CUDA side of the small-sequence kernels
// (docs/semantics.md#8-small-sequence-problems) as plain C++17, so that nvcc compiles
// small_seq_kernels.cu without the C++20 data-model headers. The host wrapper (small_seq_cuda.cpp)
// validates and lists the documents (small_seq_plan.hpp), converts the seam's doubles to
// 16-bit storage patterns (attention_device.hpp's to_storage_bits) and back; the
// bench calls small_seq_on_device directly to time the kernels with CUDA events.
// Checked by the small-seq properties on the `cuda` backend when a device is
// present; without one, only by compiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/gpu/small_seq/small_seq_params.hpp"

namespace attn_oracle::gpu {

// The backward keeps dS and P of the group's query heads in shared memory:
// 2 * 16 * 4 B per query head per warp, 4 warps a block (32 KiB at this bound).
inline constexpr int kSmallSeqMaxGroup = 64;

struct DeviceSmallSeqInputs {
  SmallSeqParams params;  // docs, totals, heads, head_dim, scale, mask, window, dtype; pointers ignored
  bool backward = false;
  int max_keys = 0;                                // max of keys: picks the kernels' key bound
  std::vector<int64_t> q_token, first_key, q_pos;  // [docs]
  std::vector<int32_t> keys;                       // [docs]
  std::vector<int64_t> kv_pos;                     // [total_kv]
  std::vector<uint16_t> q;    // [total_q, heads_q, head_dim], fp16 / bf16 bit patterns
  std::vector<uint16_t> k;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> v;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> d_o;  // [total_q, heads_q, head_dim]; empty unless backward
  // > 0: after the checked run, launch the forward (and backward) kernel this many
  // more times and report the median CUDA-event time of each (bench only).
  int timing_reps = 0;
};

struct DeviceSmallSeqOutputs {
  std::vector<uint16_t> o;   // [total_q, heads_q, head_dim]; tokens of no document 0
  std::vector<float> p;      // [docs, heads_q, 16]
  std::vector<uint16_t> dq;  // backward only, layouts as the inputs
  std::vector<uint16_t> dk;
  std::vector<uint16_t> dv;
  float fwd_ms = 0.0f, bwd_ms = 0.0f;  // median kernel times (timing_reps > 0)
  std::string failure;                 // a CUDA failure or an uninstantiated shape; empty on success
};

// Whether a kernel exists for (dtype, head_dim, key bound): fp16 / bf16, head_dim
// 64..512 in steps of 64, max_keys 1..16.
bool small_seq_kernels_instantiated(int dtype, int head_dim, int max_keys);

// Uploads, zero-fills o (and dq, dk, dv), runs the forward and, when in.backward,
// the backward kernel, downloads. False (with out.failure) on a CUDA failure.
bool small_seq_on_device(const DeviceSmallSeqInputs& in, DeviceSmallSeqOutputs& out);

}  // namespace attn_oracle::gpu
