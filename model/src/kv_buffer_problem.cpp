// kv_buffer_problem.cpp: the shared K/V buffer problem of docs/semantics.md#3-metadata as
// data: validation (codes in the order kv_buffer.hpp gives), micro-sequence
// ranges, the whole-sequence problem, the seeded inputs and the slice / buffer
// layouts. The float64 references live in reference/src/kv_buffer.cpp.
// Tested by tests/kv_buffer_test.cpp (error codes, ranges, layouts).
#include "attn_oracle/model/kv_buffer.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "attn_oracle/model/memory_budget.hpp"

namespace attn_oracle::inline model {
namespace {

int64_t total_tokens(const KvBufferProblem& p) {
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  return n;
}

std::optional<Error> check_size(const char* name, const std::vector<double>& t, int64_t expected,
                                const std::string& layout) {
  if (static_cast<int64_t>(t.size()) == expected) return std::nullopt;
  return Error{ErrorCode::bad_tensor_shape, std::string("tensor ") + name + " has " + std::to_string(t.size()) +
                                                " elements, expected " + std::to_string(expected) + " (" + layout + ")"};
}

std::string dims(std::initializer_list<int64_t> d) { return shape_to_string(Shape(d)); }

}  // namespace

// ---------------------------------------------------------------------------
// Problem bookkeeping
// ---------------------------------------------------------------------------

// The sequence's tensors, the buffers and their gradients, and the explicit mask
// (with scores and probabilities) of one micro-sequence against its narrowed
// range; checked before N is summed into anything that could overflow.
std::optional<Error> check_kv_buffer_memory(const KvBufferProblem& p) {
  const AttentionShape& s = p.shape;
  int64_t n = 0;
  for (int64_t length : p.doc_lengths)
    if (__builtin_add_overflow(n, length, &n)) n = -1;  // MemoryNeed reports -1 as an overflow
  MemoryNeed need;
  constexpr int64_t kBytes = sizeof(double);
  need.add("q, o, do, dq [N, Hq, D] x 4", {n, s.heads_q, s.head_dim, 4, kBytes});
  need.add("k, v, dk, dv and the two buffers [N, Hkv, D] x 8", {n, s.heads_kv, s.head_dim, 8, kBytes});
  need.add("the mask, scores and probabilities of one micro-sequence",
           {std::min(n, p.micro_seq_tokens), n, 3 * kBytes + 1});
  return need.check("the shared K/V buffer");
}

Expected<KvBufferSizes> validate_kv_buffer(const KvBufferProblem& p, const AttentionInputs* in) {
  if (p.doc_lengths.empty())
    return Error{ErrorCode::kv_buffer_document_length, "doc_lengths is empty: the sequence needs a document"};
  for (size_t d = 0; d < p.doc_lengths.size(); ++d)
    if (p.doc_lengths[d] < 1)
      return Error{ErrorCode::kv_buffer_document_length, "doc_lengths[" + std::to_string(d) + "] = " +
                                                             std::to_string(p.doc_lengths[d]) + ", must be >= 1"};
  if (p.micro_seq_tokens < 1)
    return Error{ErrorCode::kv_buffer_micro_seq_tokens,
                 "micro_seq_tokens = " + std::to_string(p.micro_seq_tokens) + ", must be >= 1"};
  const AttentionShape& s = p.shape;
  if (s.heads_q < 1 || s.heads_kv < 1 || s.head_dim < 1 || s.heads_q % s.heads_kv != 0)
    return Error{ErrorCode::bad_heads, "heads_q = " + std::to_string(s.heads_q) + ", heads_kv = " +
                                           std::to_string(s.heads_kv) + ", head_dim = " + std::to_string(s.head_dim) +
                                           ": counts >= 1 and heads_q a multiple of heads_kv"};
  if (auto e = check_kv_buffer_memory(p)) return *e;
  KvBufferSizes z;
  z.tokens = total_tokens(p);
  z.micro_sequences = (z.tokens + p.micro_seq_tokens - 1) / p.micro_seq_tokens;
  z.heads_q = s.heads_q, z.heads_kv = s.heads_kv, z.head_dim = s.head_dim;
  if (in == nullptr) return z;
  const int64_t q = z.tokens * z.heads_q * z.head_dim, kv = z.tokens * z.heads_kv * z.head_dim;
  const std::string ql = dims({z.tokens, z.heads_q, z.head_dim}), kvl = dims({z.tokens, z.heads_kv, z.head_dim});
  if (auto e = check_size("q", in->q, q, ql)) return *e;
  if (auto e = check_size("k", in->k, kv, kvl)) return *e;
  if (auto e = check_size("v", in->v, kv, kvl)) return *e;
  if (auto e = check_size("do", in->d_o, s.backward ? q : 0, s.backward ? ql : "none without backward")) return *e;
  if (auto e = check_attention_values(s, *in, z.tokens, z.tokens)) return *e;
  return z;
}

std::optional<Error> check_micro_sequence_index(const KvBufferSizes& z, int64_t i) {
  if (i >= 0 && i < z.micro_sequences) return std::nullopt;
  return Error{ErrorCode::kv_buffer_slice_out_of_bounds,
               "micro-sequence " + std::to_string(i) + " is outside the buffer of " + std::to_string(z.tokens) +
                   " tokens (" + std::to_string(z.micro_sequences) + " micro-sequences)"};
}

TokenRange micro_sequence_range(const KvBufferProblem& p, int64_t i) {
  const int64_t begin = i * p.micro_seq_tokens;
  return TokenRange{begin, std::min(begin + p.micro_seq_tokens, total_tokens(p))};
}

AttentionProblem whole_sequence_problem(const KvBufferProblem& p) {
  const int64_t n = total_tokens(p);
  std::vector<int64_t> ids, pos;
  for (size_t d = 0; d < p.doc_lengths.size(); ++d)
    for (int64_t t = 0; t < p.doc_lengths[d]; ++t) ids.push_back(static_cast<int64_t>(d) + 1), pos.push_back(t);
  AttentionProblem out;
  out.batch.mask = MaskKind::causal;
  out.batch.max_segments = std::max<int64_t>(1, static_cast<int64_t>(p.doc_lengths.size()));
  out.batch.q = PackedSide{IntArray({1, n}, ids), IntArray({1, n}, pos)};
  out.batch.kv = out.batch.q;
  out.shape = p.shape;
  return out;
}

AttentionInputs generate_kv_buffer_inputs(const KvBufferProblem& p, uint64_t seed) {
  if (!validate_kv_buffer(p)) return {};
  return generate_inputs(whole_sequence_problem(p), seed);
}

std::vector<double> token_rows(const std::vector<double>& t, int64_t begin, int64_t end, int64_t heads, int64_t dim) {
  const int64_t row = heads * dim;
  return std::vector<double>(t.begin() + begin * row, t.begin() + end * row);
}

std::vector<double> buffer_part(const std::vector<double>& buffer, int part, int64_t begin, int64_t end,
                                int64_t heads_kv, int64_t dim) {
  const int64_t row = heads_kv * dim;
  std::vector<double> out;
  out.reserve(static_cast<size_t>((end - begin) * row));
  for (int64_t t = begin; t < end; ++t) {
    const auto first = buffer.begin() + (t * 2 + part) * row;
    out.insert(out.end(), first, first + row);
  }
  return out;
}

std::vector<double> kv_slice_of(const KvBufferProblem& p, int64_t i, const AttentionInputs& in) {
  const TokenRange r = micro_sequence_range(p, i);
  const int64_t row = p.shape.heads_kv * p.shape.head_dim;
  std::vector<double> slice;
  for (int64_t t = r.begin; t < r.end; ++t) {
    slice.insert(slice.end(), in.k.begin() + t * row, in.k.begin() + (t + 1) * row);
    slice.insert(slice.end(), in.v.begin() + t * row, in.v.begin() + (t + 1) * row);
  }
  return slice;
}

std::vector<int64_t> document_starts(const KvBufferProblem& p) {
  std::vector<int64_t> starts{0};
  for (int64_t l : p.doc_lengths) starts.push_back(starts.back() + l);
  return starts;
}

std::optional<Error> check_buffer_size(const char* name, const std::vector<double>& t, int64_t tokens,
                                       const KvBufferSizes& z) {
  return check_size(name, t, tokens * 2 * z.heads_kv * z.head_dim, dims({tokens, 2, z.heads_kv, z.head_dim}));
}

}  // namespace attn_oracle::model
