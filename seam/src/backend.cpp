// backend.cpp: capabilities and the guard-banded buffers that attention_into is
// checked with. The registry is backend_registry.cpp.
#include "attn_oracle/seam/backend.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

namespace attn_oracle::inline seam {

std::string_view to_string(Capability capability) {
  switch (capability) {
    case Capability::metadata: return "metadata";
    case Capability::attention: return "attention";
    case Capability::attention_buffers: return "attention_buffers";
    case Capability::small_seq: return "small_seq";
    case Capability::sharding: return "sharding";
    case Capability::kv_buffer: return "kv_buffer";
    case Capability::context_parallel: return "context_parallel";
  }
  return "?";
}

std::string_view to_string(KvBufferStep step) {
  switch (step) {
    case KvBufferStep::write_slice: return "write_slice";
    case KvBufferStep::attend: return "attend";
    case KvBufferStep::stream: return "stream";
  }
  return "?";
}

bool KvBufferSteps::has(KvBufferStep step) const {
  switch (step) {
    case KvBufferStep::write_slice: return write_slice;
    case KvBufferStep::attend: return attend;
    case KvBufferStep::stream: return stream;
  }
  return false;
}

namespace {
Error step_not_served(KvBufferStep step) {
  return Error{ErrorCode::unsupported, "this backend does not serve the kv_buffer step " + std::string(to_string(step))};
}
}  // namespace

std::optional<Error> KvBufferCapability::write_slice(const KvBufferProblem&, int64_t, const std::vector<double>&,
                                                     std::vector<double>&) {
  return step_not_served(KvBufferStep::write_slice);
}

Expected<AttentionResult> KvBufferCapability::attend(const KvBufferProblem&, int64_t, const AttentionInputs&,
                                                     const std::vector<double>&, std::vector<double>*) {
  return step_not_served(KvBufferStep::attend);
}

Expected<AttentionResult> KvBufferCapability::stream(const KvBufferProblem&, const AttentionInputs&) {
  return step_not_served(KvBufferStep::stream);
}

bool Backend::has(Capability capability) {
  switch (capability) {
    case Capability::metadata: return metadata() != nullptr;
    case Capability::attention: return attention() != nullptr;
    case Capability::attention_buffers: return attention() != nullptr && attention()->supports_attention_into();
    case Capability::small_seq: return small_seq() != nullptr;
    case Capability::sharding: return sharding() != nullptr;
    case Capability::kv_buffer: return kv_buffer() != nullptr;
    case Capability::context_parallel: return context_parallel() != nullptr;
  }
  return false;
}

std::vector<Capability> Backend::capabilities() {
  std::vector<Capability> out;
  for (Capability c : {Capability::metadata, Capability::attention, Capability::attention_buffers, Capability::small_seq, Capability::sharding,
                       Capability::kv_buffer, Capability::context_parallel})
    if (has(c)) out.push_back(c);
  return out;
}

std::string_view to_string(CpOp op) {
  switch (op) {
    case CpOp::rank_metadata: return "rank_metadata";
    case CpOp::rank_attention: return "rank_attention";
    case CpOp::run: return "cp_attention";
  }
  return "?";
}

Expected<std::vector<double>> ContextParallelCapability::reorder(const CpLayout& layout, const AttentionProblem& problem,
                                                                 const std::vector<double>& values, int64_t width,
                                                                 bool inverse) {
  const Expected<std::vector<int64_t>> perm = permutation(layout, problem);
  if (!perm) return perm.error();
  const int64_t t_len = problem.batch.q.segment_ids.shape.back();
  if (width < 1 || static_cast<int64_t>(values.size()) != static_cast<int64_t>(perm->size()) * width)
    return Error{ErrorCode::bad_tensor_shape, std::to_string(values.size()) + " values are not [B, T = " +
                                                  std::to_string(t_len) + ", " + std::to_string(width) + "]"};
  return cp_reorder_tokens(values, perm.value(), t_len, width, inverse);
}

// ------------------------------------------------------------------- guard-banded buffers
GuardedAttentionBuffers::GuardedAttentionBuffers(const AttentionProblem& problem, const ProducedOutputs& produced) {
  const auto sizes = validate_attention(problem);
  if (!sizes) return;
  const double poison = std::bit_cast<double>(kPoison);
  tensors_.reserve(5);  // no reallocation: each slot points into its tensor's storage
  auto add = [&](double*& slot, std::string name, int64_t elems) {
    tensors_.push_back(Guarded{std::move(name), std::vector<double>(elems + 2 * kGuard, poison), elems});
    slot = tensors_.back().storage.data() + kGuard;
  };
  add(buffers_.o, "o", sizes->q_elems());
  if (produced.lse) add(buffers_.lse, "lse", sizes->lse_elems());
  if (problem.shape.backward) {
    add(buffers_.dq, "dq", sizes->q_elems());
    add(buffers_.dk, "dk", sizes->kv_elems());
    add(buffers_.dv, "dv", sizes->kv_elems());
  }
}

std::optional<std::string> GuardedAttentionBuffers::first_violation() const {
  for (const Guarded& g : tensors_) {
    const int64_t total = static_cast<int64_t>(g.storage.size());
    for (int64_t at = 0; at < total; ++at) {
      const double x = g.storage[at];
      const bool guard = at < kGuard || at >= kGuard + g.elems;
      if (guard && std::bit_cast<uint64_t>(x) != kPoison) {
        std::ostringstream os;
        if (at < kGuard) os << g.name << ": guard element " << kGuard - at << " before the start";
        else os << g.name << ": guard element " << at - kGuard - g.elems << " after the end (0 = one past the last)";
        os << " was overwritten with " << x << " (bits 0x" << std::hex << std::bit_cast<uint64_t>(x) << ")";
        return os.str();
      }
      if (!guard && std::isnan(x)) {
        std::ostringstream os;
        os << g.name << "[" << at - kGuard << "] of " << g.elems << " is NaN: "
           << (std::bit_cast<uint64_t>(x) == kPoison ? "never written" : "written as NaN");
        return os.str();
      }
    }
  }
  return std::nullopt;
}

// ------------------------------------------------------------------- registry
}  // namespace attn_oracle::seam
