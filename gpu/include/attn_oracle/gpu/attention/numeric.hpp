// numeric.hpp: rounding of float to the storage types, bit-exact with the
// device's round-to-nearest-even conversions (__float2half_rn, __float2bfloat16_rn),
// so the twin rounds P and the outputs exactly as the kernels do.
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>

#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/hd.hpp"

namespace attn_oracle::gpu {

ATTN_HD float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, nan
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

// Round to the nearest fp16 value (ties to even), saturating to inf past 65504.
ATTN_HD float round_fp16(float x) {
  const float ax = x < 0 ? -x : x;
  if (!(ax == ax) || ax == INFINITY) return x;
  if (ax >= 65520.0f) return x < 0 ? -INFINITY : INFINITY;
  // Spacing of fp16 values near ax: 2^(e - 10) for normals, 2^-24 for subnormals.
  int e;
  frexpf(ax < 6.103515625e-05f ? 6.103515625e-05f : ax, &e);  // ax = f * 2^e, f in [0.5, 1)
  const float ulp = ldexpf(1.0f, e - 11);
  return rintf(x / ulp) * ulp;  // rintf rounds ties to even in the default mode
}

ATTN_HD float round_to(float x, int dtype) {
  return dtype == kBf16 ? round_bf16(x) : dtype == kFp16 ? round_fp16(x) : x;
}

}  // namespace attn_oracle::gpu
