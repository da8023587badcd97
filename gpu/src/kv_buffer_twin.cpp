// kv_buffer_twin.cpp: the CPU twin of the shared K/V buffer kernels
// (docs/semantics.md#3-metadata): the rows of kv_buffer/kv_buffer_rows.hpp in loops where the
// kernels of kv_buffer_kernels.cu run one thread per item. The token -> document
// table is one pass over the documents (O(N)); a micro-sequence's plan is then
// O(end - fdb + documents). Integer results are identical to the kernels'.
// Tested by tests/kv_buffer_test.cpp and the kv_buffer properties (`cpu`).
#include <vector>

#include "attn_oracle/gpu/kv_buffer.hpp"
#include "attn_oracle/gpu/kv_buffer/kv_buffer_rows.hpp"

namespace attn_oracle::gpu {

MicroSequenceMetadata plan_micro_sequence_twin(const KvBufferProblem& problem, int64_t i) {
  const int64_t docs = static_cast<int64_t>(problem.doc_lengths.size());
  std::vector<int64_t> starts{0};
  for (int64_t l : problem.doc_lengths) starts.push_back(starts.back() + l);
  std::vector<int64_t> token_document(starts.back());
  for (int64_t d = 0; d < docs; ++d) fill_document_tokens(starts.data(), d, token_document.data());

  KvPlanParams p;
  p.doc_starts = starts.data(), p.token_document = token_document.data();
  p.tokens = starts.back(), p.docs = docs, p.micro_seq_tokens = problem.micro_seq_tokens, p.index = i;
  const MicroRange r = micro_range(p);
  MicroSequenceMetadata out;
  out.index = i, out.begin = r.begin, out.end = r.end, out.first_document_begin = r.first_document_begin;
  out.cu_seqlens_q.resize(r.docs + 1), out.cu_seqlens_k.resize(r.docs + 1);
  out.q_document.resize(r.end - r.begin), out.q_position.resize(r.end - r.begin);
  out.kv_document.resize(r.end - r.first_document_begin), out.kv_position.resize(r.end - r.first_document_begin);
  p.cu_seqlens_q = out.cu_seqlens_q.data(), p.cu_seqlens_k = out.cu_seqlens_k.data();
  p.q_document = out.q_document.data(), p.q_position = out.q_position.data();
  p.kv_document = out.kv_document.data(), p.kv_position = out.kv_position.data();
  for (int64_t t = 0; t < r.end - r.first_document_begin; ++t) plan_token(p, r, t);
  for (int64_t s = 0; s <= r.docs; ++s) plan_boundary(p, r, s);
  return out;
}

void write_slice_twin(int64_t begin, const std::vector<double>& slice, std::vector<double>& buffer, int64_t row) {
  const KvSliceParams<double> p{slice.data(), buffer.data(), begin, static_cast<int64_t>(slice.size()) / row,
                                static_cast<int64_t>(buffer.size()) / row, row};
  for (int64_t e = 0; e < p.len * row; ++e) write_slice_element(p, e);
}

void accumulate_grads_twin(int64_t first, const std::vector<double>& dk, const std::vector<double>& dv,
                           std::vector<double>& grad_buffer, int64_t row_kv) {
  const KvGradParams<double> p{dk.data(), dv.data(), grad_buffer.data(), first,
                               static_cast<int64_t>(dk.size()) / row_kv,
                               static_cast<int64_t>(grad_buffer.size()) / (2 * row_kv), row_kv};
  for (int64_t e = 0; e < p.len * row_kv; ++e) accumulate_grad_element<float>(p, e);
}

}  // namespace attn_oracle::gpu
