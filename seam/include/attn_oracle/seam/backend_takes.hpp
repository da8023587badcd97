// backend_takes.hpp: whether a backend takes a problem, answered once for every
// caller: the properties (through properties/backend_calls.hpp) and `eval`,
// `replay`, `repro` and the fixture runner (through the case ops). The answer is
// the backend's declared domain first (input_domain.hpp; the reason names the
// domain field), then its capability's `unsupported` hook; nullopt when it takes
// the problem. A declined problem is never judged: a property counts it with
// the reason, a case says SKIP with it.
//
// A hook may assume a valid input: callers holding an input that does not
// validate ask the domain alone (`*_domain_declines`), then call the backend,
// which must reject it with the code of docs/semantics.md#4-error-codes.
//
// Checked by tests/input_domain_test.cpp (the properties) and
// tests/backend_takes_test.cpp (the case path).
#pragma once

#include <optional>
#include <string>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline seam {

std::optional<std::string> metadata_declines(Backend& backend, const PackedBatch& batch);
std::optional<std::string> attention_declines(Backend& backend, const AttentionProblem& problem);
std::optional<std::string> small_seq_declines(Backend& backend, const AttentionProblem& problem);
// The domain alone, for an input that may not validate.
std::optional<std::string> domain_declines(const Backend& backend, const AttentionProblem& problem);
std::optional<std::string> kv_buffer_declines(Backend& backend, const KvBufferProblem& problem);
std::optional<std::string> kv_buffer_domain_declines(const Backend& backend, const KvBufferProblem& problem);
// The unsharded problem is asked of the domain, the call of the hook; a call of
// shapes only (no problem: null) is asked of the hook alone.
std::optional<std::string> sharding_declines(Backend& backend, const Sharding& sharding, const ShardedShapes& shapes,
                                             const AttentionProblem* problem);
// The layout's fields and the problem asked of the domain, then the hook.
// `layout_sizes` false: cp and stripe are not asked (an invalid draw's size is its point).
std::optional<std::string> context_parallel_declines(Backend& backend, const CpLayout& layout,
                                                     const AttentionProblem& problem, bool layout_sizes = true);

}  // namespace attn_oracle::seam
