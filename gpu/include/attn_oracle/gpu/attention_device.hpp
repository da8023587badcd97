// attention_device.hpp: the CUDA side of the fused varlen attention
// (docs/semantics.md#5-attention-outputs-and-gradients) as plain C++17, so that nvcc compiles
// attention_device.cu and the tensor-core kernels of flash/ without the C++20 data-model
// headers. The host wrapper (attention_cuda.cpp) validates, converts the seam's double
// tensors to 16-bit storage patterns and back, and turns failures into Errors; the bench
// calls attention_on_device directly to time the kernels with CUDA events.
//
// Storage conversions live here (not in the .cu) because both the wrapper and the
// bench need them on the host; they round to nearest even through numeric.hpp,
// bit-exact with __float2half_rn / __float2bfloat16_rn.
// Checked by the conformance properties on the `cuda` backend (tolerance against
// the float64 reference) and, without a device, only by compiling.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/numeric.hpp"

namespace attn_oracle::gpu {

// One attention call on the host side: shape, mask and window in `params` (its
// pointers are ignored), metadata and tensors as host arrays.
struct DeviceAttentionInputs {
  AttentionFwdParams params;  // docs, total_q/kv, heads, head_dim, scale, mask, window, dtype
  bool backward = false;
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_kv;          // [docs + 1]
  std::vector<int64_t> ragged_offsets_q, ragged_offsets_kv;  // [docs + 1]
  std::vector<uint16_t> q;    // [total_q, heads_q, head_dim], fp16 / bf16 bit patterns
  std::vector<uint16_t> k;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> v;    // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> d_o;  // [total_q, heads_q, head_dim]; empty unless backward
  // > 0: after the checked run, launch the forward (and backward) kernels this many
  // more times and report the median CUDA-event time of each pass (bench only).
  int timing_reps = 0;
  // The kernels: SM80's, or Hopper's (sm_90a) forward and backward where they fit the
  // problem (flash_launch.hpp; else SM80's: DeviceAttentionOutputs says which ran).
  FlashArch arch = FlashArch::sm80;
};

struct DeviceAttentionOutputs {
  std::vector<uint16_t> o;   // [total_q, heads_q, head_dim]; tokens of no document 0
  std::vector<float> lse;    // [heads_q, total_q]; -inf where nothing is attended
  std::vector<uint16_t> dq;  // [total_q, heads_q, head_dim]; backward only
  std::vector<uint16_t> dk;  // [total_kv, heads_kv, head_dim]
  std::vector<uint16_t> dv;  // [total_kv, heads_kv, head_dim]
  float fwd_ms = 0.0f;       // median kernel time of one forward pass (timing_reps > 0)
  float bwd_ms = 0.0f;       // median of one backward pass: delta, dK/dV, dQ kernels
  FlashArch forward_arch = FlashArch::sm80;   // the forward kernel that ran
  FlashArch backward_arch = FlashArch::sm80;  // the backward kernels that ran
  std::string failure;       // a CUDA failure or an unsupported shape, empty on success
};

// Why this build cannot run the kernels (a CUDA build without the CUTLASS headers),
// nullptr when it can.
const char* attention_device_missing();

// Whether the kernels are instantiated for (dtype, head_dim): the dispatch grid.
bool attention_device_instantiated(int dtype, int head_dim);

// Uploads, fills the outputs of uncovered tokens (o = 0, lse = -inf, grads = 0),
// runs the tensor-core forward and, when in.backward, the deterministic backward
// (delta, dK/dV per key block, dQ per q block, no atomics), downloads. Returns
// false (with out.failure) on a CUDA failure, a build without the kernels or an
// uninstantiated shape.
bool attention_on_device(const DeviceAttentionInputs& in, DeviceAttentionOutputs& out);

// ------------------------------------------------------------------ storage patterns
// x must be finite or +-inf; it is rounded to the dtype first (ties to even).
inline uint16_t to_storage_bits(float x, int dtype) {
  uint32_t u;
  if (dtype == kBf16) {
    const float r = round_bf16(x);
    std::memcpy(&u, &r, 4);
    return static_cast<uint16_t>(u >> 16);
  }
  const float r = round_fp16(x);
  std::memcpy(&u, &r, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(r);
  if (a != a) return sign | 0x7e00u;
  if (a == INFINITY) return sign | 0x7c00u;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(a * 16777216.0f);  // subnormal: a = m * 2^-24
  const int exponent = static_cast<int>((u >> 23) & 0xffu) - 127;                   // in [-14, 15] once rounded
  return sign | static_cast<uint16_t>((exponent + 15) << 10) | static_cast<uint16_t>((u >> 13) & 0x3ffu);
}

inline float from_storage_bits(uint16_t bits, int dtype) {
  float x;
  if (dtype == kBf16) {
    const uint32_t u = uint32_t(bits) << 16;
    std::memcpy(&x, &u, 4);
    return x;
  }
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0x1f) x = mantissa ? NAN : INFINITY;
  else if (exponent == 0) x = std::ldexp(static_cast<float>(mantissa), -24);
  else x = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  return (bits & 0x8000u) ? -x : x;
}

}  // namespace attn_oracle::gpu
