// kv_buffer_kernels.cu: the shared K/V buffer kernels (docs/semantics.md#3-metadata) on the
// rows of kv_buffer/kv_buffer_rows.hpp, one thread per item; the CPU twin
// (kv_buffer_twin.cpp) runs the same rows in loops. Plain C++17 includes only.
#include <cuda_runtime.h>

#include "attn_oracle/gpu/kv_buffer/kv_buffer_rows.hpp"
#include "attn_oracle/gpu/kv_buffer_device.hpp"

namespace attn_oracle::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t items) { return static_cast<int>((items + kThreads - 1) / kThreads); }

__global__ void fill_document_tokens_kernel(const int64_t* doc_starts, int64_t docs, int64_t* token_document) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d < docs) fill_document_tokens(doc_starts, d, token_document);
}

__global__ void plan_kernel(KvPlanParams p, MicroRange r) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t kv_tokens = r.end - r.first_document_begin;
  if (i < kv_tokens) plan_token(p, r, i);
  else if (i <= kv_tokens + r.docs) plan_boundary(p, r, i - kv_tokens);
}

__global__ void write_slice_kernel(KvSliceParams<float> p, int* out_of_bounds) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (!slice_in_bounds(p.begin, p.len, p.tokens)) {  // a bad slice is an error, never a write
    if (e == 0) *out_of_bounds = 1;
    return;
  }
  if (e < p.len * p.row) write_slice_element(p, e);
}

__global__ void accumulate_kernel(KvGradParams<float> p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p.first >= 0 && p.first + p.len <= p.tokens && e < p.len * p.row_kv) accumulate_grad_element<float>(p, e);
}

// Minimal device allocation with error capture.
template <class T>
struct Device {
  T* ptr = nullptr;
  explicit Device(size_t n) { cudaMalloc(&ptr, (n ? n : 1) * sizeof(T)); }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

template <class T>
void upload(Device<T>& d, const std::vector<T>& h) {
  if (!h.empty()) cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
}
template <class T>
void download(std::vector<T>& h, const Device<T>& d) {
  if (!h.empty()) cudaMemcpy(h.data(), d.ptr, h.size() * sizeof(T), cudaMemcpyDeviceToHost);
}

bool finish(std::string& failure) {
  const cudaError_t e = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  if (e == cudaSuccess && last == cudaSuccess) return true;
  failure = cudaGetErrorString(e != cudaSuccess ? e : last);
  return false;
}

}  // namespace

bool kv_plan_on_device(const std::vector<int64_t>& doc_starts, int64_t micro_seq_tokens, int64_t index,
                       DeviceMicroSequencePlan& out, std::string& failure) {
  const int64_t docs = static_cast<int64_t>(doc_starts.size()) - 1, tokens = doc_starts.back();
  Device<int64_t> starts(doc_starts.size()), table(tokens);
  upload(starts, doc_starts);
  if (docs > 0) fill_document_tokens_kernel<<<blocks_for(docs), kThreads>>>(starts.ptr, docs, table.ptr);
  std::vector<int64_t> token_document(tokens);
  download(token_document, table);
  if (!finish(failure)) return false;
  // The range needs three table entries; the host reads them off the downloaded table.
  KvPlanParams p;
  p.doc_starts = doc_starts.data(), p.token_document = token_document.data();
  p.tokens = tokens, p.docs = docs, p.micro_seq_tokens = micro_seq_tokens, p.index = index;
  const MicroRange r = micro_range(p);
  const int64_t q_len = r.end - r.begin, kv_len = r.end - r.first_document_begin;
  Device<int64_t> cu_q(r.docs + 1), cu_k(r.docs + 1), q_doc(q_len), q_pos(q_len), kv_doc(kv_len), kv_pos(kv_len);
  p.doc_starts = starts.ptr, p.token_document = table.ptr;
  p.cu_seqlens_q = cu_q.ptr, p.cu_seqlens_k = cu_k.ptr, p.q_document = q_doc.ptr, p.q_position = q_pos.ptr;
  p.kv_document = kv_doc.ptr, p.kv_position = kv_pos.ptr;
  plan_kernel<<<blocks_for(kv_len + r.docs + 1), kThreads>>>(p, r);
  out.begin = r.begin, out.end = r.end, out.first_document_begin = r.first_document_begin;
  out.cu_seqlens_q.resize(r.docs + 1), out.cu_seqlens_k.resize(r.docs + 1);
  out.q_document.resize(q_len), out.q_position.resize(q_len), out.kv_document.resize(kv_len), out.kv_position.resize(kv_len);
  download(out.cu_seqlens_q, cu_q), download(out.cu_seqlens_k, cu_k);
  download(out.q_document, q_doc), download(out.q_position, q_pos);
  download(out.kv_document, kv_doc), download(out.kv_position, kv_pos);
  return finish(failure);
}

bool kv_write_slice_on_device(int64_t begin, const std::vector<float>& slice, std::vector<float>& buffer, int64_t row,
                              std::string& failure) {
  Device<float> s(slice.size()), b(buffer.size());
  Device<int> flag(1);
  upload(s, slice), upload(b, buffer);
  cudaMemset(flag.ptr, 0, sizeof(int));
  const KvSliceParams<float> p{s.ptr, b.ptr, begin, static_cast<int64_t>(slice.size()) / row,
                               static_cast<int64_t>(buffer.size()) / row, row};
  write_slice_kernel<<<blocks_for(p.len * row > 0 ? p.len * row : 1), kThreads>>>(p, flag.ptr);
  std::vector<int> out_of_bounds(1, 0);
  download(out_of_bounds, flag);
  download(buffer, b);
  if (!finish(failure)) return false;
  if (out_of_bounds[0]) return failure = "out of bounds", false;
  return true;
}

bool kv_accumulate_on_device(int64_t first, const std::vector<float>& dk, const std::vector<float>& dv,
                             std::vector<float>& grad, int64_t row_kv, std::string& failure) {
  Device<float> k(dk.size()), v(dv.size()), g(grad.size());
  upload(k, dk), upload(v, dv), upload(g, grad);
  const KvGradParams<float> p{k.ptr, v.ptr, g.ptr, first, static_cast<int64_t>(dk.size()) / row_kv,
                              static_cast<int64_t>(grad.size()) / (2 * row_kv), row_kv};
  if (p.len > 0) accumulate_kernel<<<blocks_for(p.len * row_kv), kThreads>>>(p);
  download(grad, g);
  return finish(failure);
}

}  // namespace attn_oracle::gpu
