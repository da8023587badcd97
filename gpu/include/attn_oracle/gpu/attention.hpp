// attention.hpp: host entry points of the fused varlen attention
// (docs/semantics.md#5-attention-outputs-and-gradients): the CPU twin and the CUDA kernels. Both
// take the problem and the inputs of the conformance seam (double arrays [R, T, H, D] whose values
// are representable in the problem's dtype), compute the metadata with the
// production metadata path, run the tiles, and return o, lse and, for backward,
// dq, dk, dv in the seam's layouts.
//
// `*_into` write into caller-owned buffers (the interior of guard-banded
// allocations in the properties), touching nothing outside the logical outputs.
#pragma once

#include <optional>
#include <string>

#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::gpu {

// Caller-owned outputs in the seam's layouts (see attention.hpp): o [R, Tq, Hq, D],
// lse [R, Hq, Tq], dq like o, dk and dv [R, Tkv, Hkv, D]; grads only for backward.
struct AttentionOutputs {
  double* o = nullptr;
  double* lse = nullptr;
  double* dq = nullptr;
  double* dk = nullptr;
  double* dv = nullptr;
};

// CPU twin: any head_dim, fp32 / fp16 / bf16, deterministic; the forward on the
// tiles of `arch`'s kernel (flash_tile.hpp), the backward the same for both.
Expected<AttentionResult> attention_twin(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         FlashArch arch = FlashArch::sm80);
std::optional<Error> attention_twin_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         const AttentionOutputs& out, FlashArch arch = FlashArch::sm80);

// CUDA kernels: the token-parallel metadata, then the tensor-core (CuTe) forward
// and deterministic backward; head_dim 64, 128 or 256, fp16 or bf16, in a build
// with the CUTLASS headers. nullopt when supported, else why not.
// `arch` = sm90: Hopper's kernels (wgmma and TMA, flash_{fwd,bwd}_sm90.cu) where they
// fit the problem (flash_launch.hpp: the backward at head dims 64 and 128), on a device
// of compute capability 9.0 only (attention_cuda_sm90_available).
std::optional<std::string> attention_cuda_unsupported(const AttentionProblem& problem);
Expected<AttentionResult> attention_cuda(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         FlashArch arch = FlashArch::sm80);
std::optional<Error> attention_cuda_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         const AttentionOutputs& out, FlashArch arch = FlashArch::sm80);
// Whether this build has the sm_90a kernels and the first device is sm_90 (an H100 or H200).
bool attention_cuda_sm90_available();

}  // namespace attn_oracle::gpu
