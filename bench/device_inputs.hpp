// device_inputs.hpp: the bf16 fused-attention call that the CUDA benchmarks time
// (attention_bench.cpp, gpu_bench.cpp) through gpu::attention_on_device: shape
// from a Metadata, SplitMix64 data. Include it only under ATTN_ORACLE_BENCH_CUDA:
// the device API it fills exists in CUDA builds alone.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::bench {

// SplitMix64 values uniform in [-1, 1), as bf16 bit patterns.
inline std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> bits(n);
  uint64_t state = seed;
  for (uint16_t& b : bits) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    b = gpu::to_storage_bits(static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0), gpu::kBf16);
  }
  return bits;
}

// Forward and backward over md's documents in bf16: `heads` query and kv heads of
// `head_dim`, scale 1/sqrt(head_dim), no window, THD tensors as long as md's ragged
// offsets say, q, k, v, d_o from seeds seed + 1 .. seed + 4; `timing_reps` timed
// passes after the checked one.
inline gpu::DeviceAttentionInputs bf16_attention_inputs(const Metadata& md, MaskKind mask, int heads, int head_dim,
                                                        uint64_t seed, int timing_reps) {
  gpu::DeviceAttentionInputs in;
  gpu::AttentionFwdParams& p = in.params;
  p.docs = md.documents();
  p.total_q = md.ragged_offsets_q.back(), p.total_kv = md.ragged_offsets_kv.back();
  p.heads_q = p.heads_kv = heads;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(float(head_dim));
  p.mask = static_cast<int>(mask);
  p.dtype = gpu::kBf16;
  in.backward = true;
  in.cu_seqlens_q = md.cu_seqlens_q, in.cu_seqlens_kv = md.cu_seqlens_kv;
  in.ragged_offsets_q = md.ragged_offsets_q, in.ragged_offsets_kv = md.ragged_offsets_kv;
  const size_t q_elems = size_t(p.total_q) * heads * head_dim, kv_elems = size_t(p.total_kv) * heads * head_dim;
  in.q = random_bf16(q_elems, seed + 1), in.k = random_bf16(kv_elems, seed + 2);
  in.v = random_bf16(kv_elems, seed + 3), in.d_o = random_bf16(q_elems, seed + 4);
  in.timing_reps = timing_reps;
  return in;
}

}  // namespace attn_oracle::bench
