// attention_cuda.cpp: the attention entry points of the `cuda` backend: metadata
// through the production CUDA path (metadata_cuda; its errors pass through
// unchanged), head and tensor-size checks, the seam's double tensors converted to
// fp16 / bf16 bit patterns on the host, the tensor-core kernels through
// attention_on_device (attention_device.cu), and the results widened back into the
// seam's layouts (lse [Hq, total_q] on the device -> [R, Hq, Tq]).
//
// Error precedence follows the reference: batch errors (from metadata_cuda), then
// bad_heads, then bad_tensor_shape, then `unsupported` for what the kernels lack (a
// CUDA build without the CUTLASS headers has none; fp32; head dims other than 64 /
// 128 / 256). attention_cuda_into writes only the logical outputs into the caller's
// buffers, and nothing when it returns an error (a null buffer the problem needs is
// bad_tensor_shape, as in the twin).
// Checked by the conformance properties on the `cuda` backend when a device is present.
#include <cstdint>

#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle::gpu {
namespace {

// The kernels' dtype code is the seam's enum value (attention_twin.cpp asserts it).
int device_dtype(Dtype dtype) { return static_cast<int>(dtype); }

// Sizes of the seam's tensors: R = prod(extra) * B rows of [T, H, D].
struct Layout {
  int64_t rows = 0, q_len = 0, kv_len = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t q_elems() const { return rows * q_len * heads_q * head_dim; }
  int64_t kv_elems() const { return rows * kv_len * heads_kv * head_dim; }
};

std::vector<uint16_t> to_storage(const std::vector<double>& x, int dtype) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = to_storage_bits(static_cast<float>(x[i]), dtype);
  return bits;
}

void widen(const std::vector<uint16_t>& bits, int dtype, double* to) {
  if (to == nullptr) return;
  for (size_t i = 0; i < bits.size(); ++i) to[i] = from_storage_bits(bits[i], dtype);
}

struct DeviceRun {
  Layout z;
  int dtype = kFp16;
  bool backward = false;
  DeviceAttentionOutputs out;
};

// `caller`: the buffers of attention_cuda_into, checked before any device work.
Expected<DeviceRun> run_on_device(const AttentionProblem& problem, const AttentionInputs& inputs,
                                  const AttentionOutputs* caller, FlashArch arch) {
  Expected<Metadata> md = metadata_cuda(problem.batch);  // also "no CUDA device"
  if (!md) return md.error();
  const AttentionShape& shape = problem.shape;
  if (auto e = check_heads(shape)) return *e;
  if (auto e = check_tensor_memory(md->extra, md->batch, problem.batch.q.segment_ids.shape.back(),
                                   problem.batch.kv.segment_ids.shape.back(), shape))
    return *e;
  DeviceRun run;
  Layout& z = run.z;
  z.rows = shape_product(md->extra) * md->batch;
  z.q_len = problem.batch.q.segment_ids.shape.back();
  z.kv_len = problem.batch.kv.segment_ids.shape.back();
  z.heads_q = shape.heads_q, z.heads_kv = shape.heads_kv, z.head_dim = shape.head_dim;
  if (auto e = check_tensor_size("q", inputs.q, z.q_elems())) return *e;
  if (auto e = check_tensor_size("k", inputs.k, z.kv_elems())) return *e;
  if (auto e = check_tensor_size("v", inputs.v, z.kv_elems())) return *e;
  if (auto e = check_tensor_size("do", inputs.d_o, shape.backward ? z.q_elems() : 0)) return *e;
  if (auto e = check_attention_values(shape, inputs, z.q_len, z.kv_len)) return *e;
  if (caller)
    if (auto e = check_output_buffers(*caller, z.q_elems(), z.kv_elems(), shape.backward)) return *e;
  if (auto e = check_document_spans(md.value(), z.rows, z.q_len, z.kv_len)) return *e;
  if (auto reason = attention_cuda_unsupported(problem)) return Error{ErrorCode::unsupported, *reason};

  run.dtype = device_dtype(shape.dtype);
  run.backward = shape.backward;
  DeviceAttentionInputs in;
  AttentionFwdParams& p = in.params;
  p.docs = md->documents();
  p.total_q = z.rows * z.q_len, p.total_kv = z.rows * z.kv_len;
  p.heads_q = static_cast<int>(z.heads_q), p.heads_kv = static_cast<int>(z.heads_kv);
  p.head_dim = static_cast<int>(z.head_dim);
  p.scale = static_cast<float>(shape.effective_scale());
  p.mask = static_cast<int>(problem.batch.mask);
  p.window_left = problem.batch.window.left, p.window_right = problem.batch.window.right;
  p.dtype = run.dtype;
  in.backward = shape.backward;
  in.arch = arch;
  in.cu_seqlens_q = md->cu_seqlens_q, in.cu_seqlens_kv = md->cu_seqlens_kv;
  in.ragged_offsets_q = md->ragged_offsets_q, in.ragged_offsets_kv = md->ragged_offsets_kv;
  in.q = to_storage(inputs.q, run.dtype);
  in.k = to_storage(inputs.k, run.dtype);
  in.v = to_storage(inputs.v, run.dtype);
  if (shape.backward) in.d_o = to_storage(inputs.d_o, run.dtype);
  if (!attention_on_device(in, run.out)) return Error{ErrorCode::unsupported, "CUDA failure: " + run.out.failure};
  return run;
}

// Device layouts -> the seam's.
void scatter(const DeviceRun& run, const AttentionOutputs& out) {
  const Layout& z = run.z;
  widen(run.out.o, run.dtype, out.o);
  if (out.lse) {
    const int64_t total_q = z.rows * z.q_len;
    for (int64_t r = 0; r < z.rows; ++r)
      for (int64_t h = 0; h < z.heads_q; ++h)
        for (int64_t i = 0; i < z.q_len; ++i)
          out.lse[(r * z.heads_q + h) * z.q_len + i] = run.out.lse[h * total_q + r * z.q_len + i];
  }
  if (!run.backward) return;
  widen(run.out.dq, run.dtype, out.dq);
  widen(run.out.dk, run.dtype, out.dk);
  widen(run.out.dv, run.dtype, out.dv);
}

AttentionResult result_of(const DeviceRun& run, bool backward) {
  const Layout& z = run.z;
  AttentionResult result;
  result.o.assign(static_cast<size_t>(z.q_elems()), 0.0);
  result.lse.assign(static_cast<size_t>(z.rows * z.heads_q * z.q_len), 0.0);
  AttentionOutputs out{result.o.data(), result.lse.data()};
  if (backward) {
    result.grads.emplace();
    result.grads->dq.assign(static_cast<size_t>(z.q_elems()), 0.0);
    result.grads->dk.assign(static_cast<size_t>(z.kv_elems()), 0.0);
    result.grads->dv.assign(static_cast<size_t>(z.kv_elems()), 0.0);
    out.dq = result.grads->dq.data(), out.dk = result.grads->dk.data(), out.dv = result.grads->dv.data();
  }
  scatter(run, out);
  return result;
}

}  // namespace

std::optional<std::string> attention_cuda_unsupported(const AttentionProblem& problem) {
  if (!cuda_available()) return "no CUDA device on this machine";
  if (const char* missing = attention_device_missing()) return std::string(missing);
  const AttentionShape& s = problem.shape;
  if (s.dtype == Dtype::fp32) return "the CUDA kernels store fp16 or bf16, not fp32";
  if (s.head_dim > 256 || !attention_device_instantiated(device_dtype(s.dtype), static_cast<int>(s.head_dim)))
    return "head_dim " + std::to_string(s.head_dim) + " has no CUDA kernel (instantiated: 64, 128, 256)";
  if (s.heads_q > 65535) return "heads_q " + std::to_string(s.heads_q) + " exceeds the kernels' grid (65535)";
  return std::nullopt;
}

bool attention_cuda_sm90_available() { return attention_device_missing() == nullptr && cuda_arch() == "sm_90"; }

Expected<AttentionResult> attention_cuda(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         FlashArch arch) {
  Expected<DeviceRun> run = run_on_device(problem, inputs, nullptr, arch);
  if (!run) return run.error();
  return result_of(run.value(), problem.shape.backward);
}

std::optional<Error> attention_cuda_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         const AttentionOutputs& out, FlashArch arch) {
  Expected<DeviceRun> run = run_on_device(problem, inputs, &out, arch);
  if (!run) return run.error();
  scatter(run.value(), out);
  return std::nullopt;
}

}  // namespace attn_oracle::gpu
