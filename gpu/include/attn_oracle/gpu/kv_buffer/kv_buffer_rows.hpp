// kv_buffer_rows.hpp: the per-token / per-element work of the shared K/V buffer
// (docs/semantics.md#3-metadata), written once for the CUDA kernels (kv_buffer_kernels.cu)
// and the CPU twin (kv_buffer_twin.cpp): the kernels map the index to a thread,
// the twin to a loop. Checked by tests/kv_buffer_test.cpp against the
// reference's metadata and by the kv_buffer properties on the `cpu` backend.
#pragma once

#include <cstdint>

#include "attn_oracle/gpu/hd.hpp"
#include "attn_oracle/gpu/kv_buffer/kv_buffer_params.hpp"

namespace attn_oracle::gpu {

// Micro-sequence i: q tokens [begin, end), kv tokens [fdb, end), documents
// [first_doc, first_doc + docs) of the whole sequence.
struct MicroRange {
  int64_t begin, end, first_document_begin, first_doc, docs;
};

ATTN_HD MicroRange micro_range(const KvPlanParams& p) {
  MicroRange r;
  r.begin = p.index * p.micro_seq_tokens;
  r.end = r.begin + p.micro_seq_tokens < p.tokens ? r.begin + p.micro_seq_tokens : p.tokens;
  r.first_doc = p.token_document[r.begin];
  r.first_document_begin = p.doc_starts[r.first_doc];
  r.docs = p.token_document[r.end - 1] - r.first_doc + 1;
  return r;
}

// Document d writes its own tokens into the token -> document table (O(N) over all d).
ATTN_HD void fill_document_tokens(const int64_t* doc_starts, int64_t d, int64_t* token_document) {
  for (int64_t t = doc_starts[d]; t < doc_starts[d + 1]; ++t) token_document[t] = d;
}

// kv token t of the narrowed range [fdb, end): its document (renumbered from 1)
// and position; the q side [begin, end) is a suffix of it and gets the same.
ATTN_HD void plan_token(const KvPlanParams& p, const MicroRange& r, int64_t t) {
  const int64_t g = r.first_document_begin + t, d = p.token_document[g];
  const int64_t document = d - r.first_doc + 1, position = g - p.doc_starts[d];
  p.kv_document[t] = document;
  p.kv_position[t] = position;
  if (g >= r.begin) {
    p.q_document[g - r.begin] = document;
    p.q_position[g - r.begin] = position;
  }
}

// Boundary s in 0..docs of the canonical cu_seqlens: offsets into the q range
// [begin, end) and the kv range [fdb, end), so both start at 0 (the kv side
// because the first document starts at fdb) and end at the range lengths.
ATTN_HD void plan_boundary(const KvPlanParams& p, const MicroRange& r, int64_t s) {
  const int64_t at = s == r.docs ? r.end : p.doc_starts[r.first_doc + s];
  p.cu_seqlens_q[s] = (at > r.begin ? at : r.begin) - r.begin;
  p.cu_seqlens_k[s] = at - r.first_document_begin;
}

// A slice lies inside the buffer: the write kernel refuses anything else.
ATTN_HD bool slice_in_bounds(int64_t begin, int64_t len, int64_t tokens) {
  return begin >= 0 && len >= 0 && begin <= tokens && len <= tokens - begin;
}

template <class T>
ATTN_HD void write_slice_element(const KvSliceParams<T>& p, int64_t e) {
  p.buffer[p.begin * p.row + e] = p.slice[e];
}

// Element e of the narrowed [len, Hkv, D] gradients into buffer row first + t.
// `Acc` is the buffer's accumulation type (fp32 on the device and in the twin).
template <class Acc, class T>
ATTN_HD void accumulate_grad_element(const KvGradParams<T>& p, int64_t e) {
  const int64_t t = e / p.row_kv, c = e % p.row_kv;
  T* k = p.grad + ((p.first + t) * 2) * p.row_kv + c;
  T* v = k + p.row_kv;
  *k = static_cast<T>(static_cast<Acc>(*k) + static_cast<Acc>(p.dk[e]));
  *v = static_cast<T>(static_cast<Acc>(*v) + static_cast<Acc>(p.dv[e]));
}

}  // namespace attn_oracle::gpu
