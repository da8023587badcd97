// host_checks.cpp: see host_checks.hpp.
#include "attn_oracle/gpu/host_checks.hpp"

#include <climits>
#include <string>

#include "attn_oracle/memory_budget.hpp"

namespace attn_oracle::gpu {

std::optional<Error> check_heads(const AttentionShape& s) {
  const std::string heads = "heads_q = " + std::to_string(s.heads_q) + ", heads_kv = " + std::to_string(s.heads_kv) +
                            ", head_dim = " + std::to_string(s.head_dim);
  if (s.heads_q < 1 || s.heads_kv < 1 || s.head_dim < 1)
    return Error{ErrorCode::bad_heads, heads + ": head counts and head_dim must be >= 1"};
  if (s.heads_q % s.heads_kv != 0) return Error{ErrorCode::bad_heads, heads + ": heads_q must be a multiple of heads_kv"};
  if (s.heads_q > INT_MAX || s.head_dim > INT_MAX)  // the params hold them as int, as the kernels do
    return Error{ErrorCode::unsupported, heads + ": heads_q and head_dim must fit in int"};
  return std::nullopt;
}

std::optional<Error> check_tensor_memory(const Shape& extra, int64_t batch, int64_t q_len, int64_t kv_len,
                                         const AttentionShape& s) {
  constexpr int64_t kBytes = sizeof(double);  // the host copies in and out are double
  std::vector<int64_t> q = extra, kv = extra;
  q.insert(q.end(), {batch, q_len, s.heads_q, s.head_dim, 4, kBytes});
  kv.insert(kv.end(), {batch, kv_len, s.heads_kv, s.head_dim, 4, kBytes});
  MemoryNeed need;
  need.add("q, o, do, dq", q);
  need.add("k, v, dk, dv", kv);
  return need.check("attention");
}

std::optional<Error> check_output_buffers(const AttentionOutputs& out, int64_t q_elems, int64_t kv_elems,
                                          bool backward) {
  const bool q = q_elems > 0, kv = kv_elems > 0;
  if ((q && (!out.o || !out.lse)) || (backward && ((q && !out.dq) || (kv && (!out.dk || !out.dv)))))
    return Error{ErrorCode::bad_tensor_shape, "an output buffer the problem needs is null"};
  return std::nullopt;
}

std::optional<Error> check_tensor_size(const char* name, const std::vector<double>& t, int64_t expected) {
  if (static_cast<int64_t>(t.size()) == expected) return std::nullopt;
  return Error{ErrorCode::bad_tensor_shape, std::string("tensor ") + name + " has " + std::to_string(t.size()) +
                                                " elements, expected " + std::to_string(expected)};
}

}  // namespace attn_oracle::gpu
