// kv_buffer.hpp: host entry points of the shared K/V buffer (docs/semantics.md#3-metadata) on
// the CPU twin and on CUDA. Tensors are the seam's (kv_buffer.hpp in reference/):
// the buffer and its gradient [N, 2, Hkv, D], a micro-sequence's q and d_o
// [end - begin, Hq, D].
//
// The steps (kv_buffer_stream.cpp, one driver for both devices):
//  - plan: the canonical metadata of micro-sequence i in O(tokens);
//  - write_slice: micro-sequence i's K/V into buffer[begin, end), bounds-checked;
//  - attend: the fused varlen attention (attention.hpp: the twin on `cpu`, the
//    kernels on `cuda`) on q [begin, end) against the view buffer[fdb, end), with
//    the documents' runs taken from cu_seqlens and bottom-right causal alignment;
//    with backward, dK/dV of the view added into grad_buffer[fdb, end) only;
//  - stream: write + attend forward in order, backward in reverse (the backward
//    call recomputes its micro-sequence's forward, as activation recomputation does).
// The device primitives (plan, write, accumulate) are kv_buffer_twin.cpp and
// kv_buffer_cuda.cpp over the shared rows of kv_buffer/kv_buffer_rows.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/model/kv_buffer.hpp"

namespace attn_oracle::gpu {

enum class KvDevice { twin, cuda };

Expected<MicroSequenceMetadata> kv_buffer_plan(const KvBufferProblem& problem, int64_t i, KvDevice device);
std::optional<Error> kv_buffer_write_slice(const KvBufferProblem& problem, int64_t i, const std::vector<double>& slice,
                                           std::vector<double>& buffer, KvDevice device);
Expected<AttentionResult> kv_buffer_attend(const KvBufferProblem& problem, int64_t i, const AttentionInputs& micro,
                                           const std::vector<double>& buffer, std::vector<double>* grad_buffer,
                                           KvDevice device);
Expected<AttentionResult> kv_buffer_stream(const KvBufferProblem& problem, const AttentionInputs& inputs,
                                           KvDevice device);

// Why the CUDA path cannot run this problem (no device, dtype, head_dim), or nullopt.
std::optional<std::string> kv_buffer_cuda_unsupported(const KvBufferProblem& problem);

// ------------------------------------------------------------ device primitives
// The three primitives on validated inputs of a valid problem (the driver checks).
// Grad accumulation is fp32, as a device gradient buffer holds it.
MicroSequenceMetadata plan_micro_sequence_twin(const KvBufferProblem& problem, int64_t i);
void write_slice_twin(int64_t begin, const std::vector<double>& slice, std::vector<double>& buffer, int64_t row);
void accumulate_grads_twin(int64_t first, const std::vector<double>& dk, const std::vector<double>& dv,
                           std::vector<double>& grad_buffer, int64_t row_kv);

Expected<MicroSequenceMetadata> plan_micro_sequence_cuda(const KvBufferProblem& problem, int64_t i);
std::optional<Error> write_slice_cuda(int64_t begin, const std::vector<double>& slice, std::vector<double>& buffer,
                                      int64_t row);
std::optional<Error> accumulate_grads_cuda(int64_t first, const std::vector<double>& dk, const std::vector<double>& dv,
                                           std::vector<double>& grad_buffer, int64_t row_kv);

}  // namespace attn_oracle::gpu
