// host_checks.hpp: the up-front checks every production entry point (twins and
// CUDA wrappers of attention and small-seq) makes before it touches a tensor, in
// one place so that all of them give the same code for the same problem.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/model/metadata.hpp"

namespace attn_oracle::gpu {

// bad_heads for counts < 1 or heads_q % heads_kv != 0; unsupported when heads_q or
// head_dim does not fit the int the kernels' params hold.
std::optional<Error> check_heads(const AttentionShape& shape);

// over_memory_budget (memory_budget.hpp) when the device tensors of a problem over
// `rows` = extra x B rows would not fit, checked before any size is multiplied out.
std::optional<Error> check_tensor_memory(const Shape& extra, int64_t batch, int64_t q_len, int64_t kv_len,
                                         const AttentionShape& shape);

// bad_tensor_shape when a caller buffer the problem needs is null (nothing is written
// then): o and lse when there are query elements, dq / dk / dv with backward.
std::optional<Error> check_output_buffers(const AttentionOutputs& out, int64_t q_elems, int64_t kv_elems,
                                          bool backward);

// bad_metadata unless the compacted form is one a kernel can read without going
// out of bounds: cu_seqlens start at 0 and never decrease, both sides list the
// same number of documents, and every document's span [ragged_offset, + length)
// lies inside one row of its [rows, len] tensor. Kernels trust the metadata they
// are handed (FlashAttention checks none of this); the entry points check it.
std::optional<Error> check_document_spans(const Metadata& md, int64_t rows, int64_t q_len, int64_t kv_len);

// bad_tensor_shape naming the tensor and both element counts.
std::optional<Error> check_tensor_size(const char* name, const std::vector<double>& tensor, int64_t expected);

}  // namespace attn_oracle::gpu
