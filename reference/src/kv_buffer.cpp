// kv_buffer.cpp: float64 references of the shared K/V buffer (DESIGN section 7);
// see kv_buffer.hpp for the semantics. Everything is built from the packed-batch
// data model and the attention references of reference_attention.cpp:
//  - the whole sequence is one packed row (ids 1..docs, positions from 0, causal);
//  - micro-sequence i is one packed row whose q side is [begin, end) and kv side
//    [fdb, end) with *true* positions inside each document, under top-left causal
//    on positions (pos_q >= pos_kv), which is exactly "a document sees its own
//    earlier tokens" at the token level; its metadata is read off ref::metadata.
//    (The kernels see the same thing as bottom-right alignment on the trimmed
//    runs; that formulation is the production driver's, not the reference's.)
//
// Tested by tests/kv_buffer_reference_test.cpp: hand-computed metadata (the
// [4, 1, 10] example of DESIGN section 7), streaming == whole sequence, the error
// codes, and the zero prefix of the gradient buffer.
#include "attn_oracle/kv_buffer.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "attn_oracle/memory_budget.hpp"
#include "attn_oracle/reference_metadata.hpp"

namespace attn_oracle {
namespace {

int64_t total_tokens(const KvBufferProblem& p) {
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  return n;
}

// Start of every document and the end: [docs + 1].
std::vector<int64_t> document_starts(const KvBufferProblem& p) {
  std::vector<int64_t> starts{0};
  for (int64_t l : p.doc_lengths) starts.push_back(starts.back() + l);
  return starts;
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

namespace ref {
namespace {

// Micro-sequence i as one packed row: q [begin, end), kv [fdb, end), ids the
// documents renumbered 1..S, true positions, top-left causal on positions.
struct MicroBatch {
  TokenRange q;
  int64_t first_document_begin = 0;
  PackedBatch batch;
};

MicroBatch micro_batch(const KvBufferProblem& p, int64_t i) {
  const std::vector<int64_t> starts = document_starts(p);
  const TokenRange r = micro_sequence_range(p, i);
  // The document holding token `begin`: the last start <= begin.
  const auto first = std::upper_bound(starts.begin(), starts.end() - 1, r.begin) - 1;
  const int64_t first_doc = first - starts.begin(), fdb = *first;
  auto side = [&](int64_t from) {
    std::vector<int64_t> ids, pos;
    for (int64_t t = from, d = first_doc; t < r.end; ++t) {
      while (t >= starts[d + 1]) ++d;
      ids.push_back(d - first_doc + 1);
      pos.push_back(t - starts[d]);
    }
    const int64_t n = r.end - from;
    return PackedSide{IntArray({1, n}, ids), IntArray({1, n}, pos)};
  };
  MicroBatch m{r, fdb, {}};
  m.batch.mask = MaskKind::causal;
  m.batch.q = side(r.begin);
  m.batch.kv = side(fdb);
  m.batch.max_segments = m.batch.kv.segment_ids.data.back();
  return m;
}

std::optional<Error> check_index(const KvBufferProblem& p, int64_t i, KvBufferSizes& z) {
  auto sizes = validate_kv_buffer(p);
  if (!sizes) return sizes.error();
  z = sizes.value();
  return check_micro_sequence_index(z, i);
}

}  // namespace

Expected<MicroSequenceMetadata> micro_sequence_metadata(const KvBufferProblem& p, int64_t i) {
  KvBufferSizes z;
  if (auto e = check_index(p, i, z)) return *e;
  const MicroBatch m = micro_batch(p, i);
  auto md = metadata(m.batch);
  if (!md) return md.error();
  MicroSequenceMetadata out;
  out.index = i;
  out.begin = m.q.begin, out.end = m.q.end, out.first_document_begin = m.first_document_begin;
  out.cu_seqlens_q = md->cu_seqlens_q;
  out.cu_seqlens_k = md->cu_seqlens_kv;
  out.q_document = m.batch.q.segment_ids.data, out.q_position = m.batch.q.segment_pos.data;
  out.kv_document = m.batch.kv.segment_ids.data, out.kv_position = m.batch.kv.segment_pos.data;
  return out;
}

Expected<AttentionResult> kv_buffer_whole_sequence(const KvBufferProblem& p, const AttentionInputs& in) {
  auto z = validate_kv_buffer(p, &in);
  if (!z) return z.error();
  return attention_dense_masked(whole_sequence_problem(p), in);
}

std::optional<Error> kv_buffer_write_slice(const KvBufferProblem& p, int64_t i, const std::vector<double>& slice,
                                           std::vector<double>& buffer) {
  KvBufferSizes z;
  if (auto e = check_index(p, i, z)) return *e;
  const TokenRange r = micro_sequence_range(p, i);
  const int64_t row = 2 * z.heads_kv * z.head_dim;
  if (auto e = check_size("buffer", buffer, z.buffer_elems(), dims({z.tokens, 2, z.heads_kv, z.head_dim}))) return e;
  if (auto e = check_size("slice", slice, (r.end - r.begin) * row, dims({r.end - r.begin, 2, z.heads_kv, z.head_dim})))
    return e;
  std::copy(slice.begin(), slice.end(), buffer.begin() + r.begin * row);
  return std::nullopt;
}

Expected<AttentionResult> kv_buffer_attend(const KvBufferProblem& p, int64_t i, const AttentionInputs& micro,
                                           const std::vector<double>& buffer, std::vector<double>* grad_buffer) {
  KvBufferSizes z;
  if (auto e = check_index(p, i, z)) return *e;
  const std::string buffer_layout = dims({z.tokens, 2, z.heads_kv, z.head_dim});
  if (auto e = check_size("buffer", buffer, z.buffer_elems(), buffer_layout)) return *e;
  if (p.shape.backward && grad_buffer == nullptr)
    return Error{ErrorCode::bad_tensor_shape, "backward needs a gradient buffer " + buffer_layout};
  if (p.shape.backward)
    if (auto e = check_size("grad_buffer", *grad_buffer, z.buffer_elems(), buffer_layout)) return *e;
  const MicroBatch m = micro_batch(p, i);
  const int64_t fdb = m.first_document_begin, end = m.q.end;
  AttentionProblem problem{m.batch, p.shape};
  const AttentionInputs in{micro.q, buffer_part(buffer, 0, fdb, end, z.heads_kv, z.head_dim),
                           buffer_part(buffer, 1, fdb, end, z.heads_kv, z.head_dim), micro.d_o};
  auto r = attention_dense_masked(problem, in);
  if (!r || !p.shape.backward) return r;
  const int64_t row = z.heads_kv * z.head_dim;
  for (int64_t t = 0; t < end - fdb; ++t)
    for (int64_t c = 0; c < row; ++c) {
      (*grad_buffer)[((fdb + t) * 2 + 0) * row + c] += r->grads->dk[t * row + c];
      (*grad_buffer)[((fdb + t) * 2 + 1) * row + c] += r->grads->dv[t * row + c];
    }
  return r;
}

Expected<AttentionResult> kv_buffer_streaming(const KvBufferProblem& p, const AttentionInputs& in) {
  auto sizes = validate_kv_buffer(p, &in);
  if (!sizes) return sizes.error();
  const KvBufferSizes& z = sizes.value();
  const int64_t hq = z.heads_q, d = z.head_dim, n = z.tokens;
  AttentionResult out;
  out.o.assign(n * hq * d, 0.0);
  out.lse.assign(hq * n, 0.0);
  std::vector<double> buffer(z.buffer_elems(), 0.0), grad(z.buffer_elems(), 0.0);
  KvBufferProblem fwd = p;
  fwd.shape.backward = false;
  for (int64_t i = 0; i < z.micro_sequences; ++i) {
    const TokenRange r = micro_sequence_range(p, i);
    if (auto e = kv_buffer_write_slice(fwd, i, kv_slice_of(p, i, in), buffer)) return *e;
    auto step = kv_buffer_attend(fwd, i, AttentionInputs{token_rows(in.q, r.begin, r.end, hq, d), {}, {}, {}}, buffer,
                                 nullptr);
    if (!step) return step.error();
    std::copy(step->o.begin(), step->o.end(), out.o.begin() + r.begin * hq * d);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t t = r.begin; t < r.end; ++t) out.lse[h * n + t] = step->lse[h * (r.end - r.begin) + t - r.begin];
  }
  if (!p.shape.backward) return out;
  AttentionGradients g{std::vector<double>(n * hq * d, 0.0), {}, {}};
  for (int64_t i = z.micro_sequences - 1; i >= 0; --i) {
    const TokenRange r = micro_sequence_range(p, i);
    const AttentionInputs micro{token_rows(in.q, r.begin, r.end, hq, d), {}, {}, token_rows(in.d_o, r.begin, r.end, hq, d)};
    auto step = kv_buffer_attend(p, i, micro, buffer, &grad);
    if (!step) return step.error();
    std::copy(step->grads->dq.begin(), step->grads->dq.end(), g.dq.begin() + r.begin * hq * d);
  }
  g.dk = buffer_part(grad, 0, 0, n, z.heads_kv, d);
  g.dv = buffer_part(grad, 1, 0, n, z.heads_kv, d);
  out.grads = std::move(g);
  return out;
}

}  // namespace ref
}  // namespace attn_oracle
