// backend_takes.cpp: see backend_takes.hpp.
#include "attn_oracle/seam/backend_takes.hpp"

namespace attn_oracle::inline seam {
namespace {

std::optional<std::string> domain(std::optional<std::string> why) {
  if (why) return "outside the backend's domain: " + *why;
  return std::nullopt;
}

std::optional<std::string> hook(std::optional<std::string> reason) {
  if (reason) return "unsupported: " + *reason;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> metadata_declines(Backend& backend, const PackedBatch& batch) {
  if (auto why = domain(outside_domain(backend.domain(), batch))) return why;
  return hook(backend.metadata()->unsupported(batch));
}

std::optional<std::string> domain_declines(const Backend& backend, const AttentionProblem& problem) {
  return domain(outside_domain(backend.domain(), problem));
}

std::optional<std::string> attention_declines(Backend& backend, const AttentionProblem& problem) {
  if (auto why = domain_declines(backend, problem)) return why;
  return hook(backend.attention()->unsupported(problem));
}

std::optional<std::string> small_seq_declines(Backend& backend, const AttentionProblem& problem) {
  if (auto why = domain_declines(backend, problem)) return why;
  return hook(backend.small_seq()->unsupported(problem));
}

std::optional<std::string> kv_buffer_domain_declines(const Backend& backend, const KvBufferProblem& problem) {
  return domain(outside_domain(backend.domain(), problem));
}

std::optional<std::string> kv_buffer_declines(Backend& backend, const KvBufferProblem& problem) {
  if (auto why = kv_buffer_domain_declines(backend, problem)) return why;
  return hook(backend.kv_buffer()->unsupported(problem));
}

std::optional<std::string> sharding_declines(Backend& backend, const Sharding& sharding, const ShardedShapes& shapes,
                                             const AttentionProblem* problem) {
  if (problem)
    if (auto why = domain_declines(backend, *problem)) return why;
  return hook(backend.sharding()->unsupported(sharding, shapes));
}

std::optional<std::string> context_parallel_declines(Backend& backend, const CpLayout& layout,
                                                     const AttentionProblem& problem, bool layout_sizes) {
  CpLayout asked = layout;
  if (!layout_sizes) {  // an invalid size is the case being judged: only strategy and balance are asked
    const InputDomain d = backend.domain();
    if (!d.cp_sizes.empty()) asked.cp = d.cp_sizes.front();
    if (!d.cp_stripes.empty()) asked.stripe = d.cp_stripes.front();
  }
  if (auto why = domain(outside_domain(backend.domain(), asked, problem))) return why;
  return hook(backend.context_parallel()->unsupported(layout, problem));
}

}  // namespace attn_oracle::seam
