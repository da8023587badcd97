// kv_buffer.cpp: float64 references of the shared K/V buffer (docs/semantics.md#3-metadata);
// see attn_oracle/model/kv_buffer.hpp for the semantics. Everything is built from the
// packed-batch data model and the attention references of reference_attention.cpp:
//  - the whole sequence is one packed row (ids 1..docs, positions from 0, causal);
//  - micro-sequence i is one packed row whose q side is [begin, end) and kv side
//    [fdb, end) with *true* positions inside each document, under top-left causal
//    on positions (pos_q >= pos_kv), which is exactly "a document sees its own
//    earlier tokens" at the token level; its metadata is read off ref::metadata.
//    (The kernels see the same thing as bottom-right alignment on the trimmed
//    runs; that formulation is the production driver's, not the reference's.)
//
// Tested by tests/kv_buffer_test.cpp: hand-computed metadata (the [4, 1, 10]
// example of docs/semantics.md#3-metadata), streaming == whole sequence, the error codes,
// and the zero prefix of the gradient buffer.
#include "attn_oracle/reference/kv_buffer.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle::ref {
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
  if (auto e = check_buffer_size("buffer", buffer, z.tokens, z)) return e;
  if (auto e = check_buffer_size("slice", slice, r.end - r.begin, z)) return e;
  std::copy(slice.begin(), slice.end(), buffer.begin() + r.begin * row);
  return std::nullopt;
}

Expected<AttentionResult> kv_buffer_attend(const KvBufferProblem& p, int64_t i, const AttentionInputs& micro,
                                           const std::vector<double>& buffer, std::vector<double>* grad_buffer) {
  KvBufferSizes z;
  if (auto e = check_index(p, i, z)) return *e;
  if (auto e = check_buffer_size("buffer", buffer, z.tokens, z)) return *e;
  if (p.shape.backward && grad_buffer == nullptr)
    return Error{ErrorCode::bad_tensor_shape, "backward needs a gradient buffer " + shape_to_string({z.tokens, 2, z.heads_kv, z.head_dim})};
  if (p.shape.backward)
    if (auto e = check_buffer_size("grad_buffer", *grad_buffer, z.tokens, z)) return *e;
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

}  // namespace attn_oracle::ref
