// host_checks.cpp: see host_checks.hpp.
#include "attn_oracle/gpu/host_checks.hpp"

#include <climits>
#include <string>

#include "attn_oracle/model/memory_budget.hpp"

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

namespace {

std::optional<Error> bad_metadata(const std::string& message) { return Error{ErrorCode::bad_metadata, message}; }

std::optional<Error> check_side_spans(const char* side, const std::vector<int64_t>& cu,
                                      const std::vector<int64_t>& ragged, int64_t rows, int64_t len) {
  if (cu.empty() || cu.front() != 0) return bad_metadata(std::string("cu_seqlens_") + side + " does not start at 0");
  if (ragged.size() != cu.size())
    return bad_metadata(std::string("ragged_offsets_") + side + " has " + std::to_string(ragged.size()) +
                        " entries, cu_seqlens_" + side + " " + std::to_string(cu.size()));
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t start = ragged[s], length = cu[s + 1] - cu[s];
    const std::string doc = std::string(side) + " document " + std::to_string(s) + ": ";
    if (length < 0) return bad_metadata(doc + "cu_seqlens decreases (" + std::to_string(cu[s]) + " then " + std::to_string(cu[s + 1]) + ")");
    if (start < 0 || len <= 0 || start / len >= rows || start % len + length > len)
      return bad_metadata(doc + "span [" + std::to_string(start) + ", " + std::to_string(start + length) +
                          ") is not inside one row of " + std::to_string(len) + " tokens (" + std::to_string(rows) + " rows)");
  }
  return std::nullopt;
}

}  // namespace

std::optional<Error> check_document_spans(const Metadata& md, int64_t rows, int64_t q_len, int64_t kv_len) {
  if (md.cu_seqlens_q.size() != md.cu_seqlens_kv.size())
    return bad_metadata("cu_seqlens_q has " + std::to_string(md.cu_seqlens_q.size()) + " entries, cu_seqlens_kv " +
                        std::to_string(md.cu_seqlens_kv.size()));
  if (auto e = check_side_spans("q", md.cu_seqlens_q, md.ragged_offsets_q, rows, q_len)) return e;
  return check_side_spans("kv", md.cu_seqlens_kv, md.ragged_offsets_kv, rows, kv_len);
}

}  // namespace attn_oracle::gpu
