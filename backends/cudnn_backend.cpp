// cudnn_backend.cpp: the `cudnn` backend's attention capability
// (docs/semantics.md#5-attention-outputs-and-gradients) on cuDNN SDPA: metadata through the
// production CUDA path (its errors pass through unchanged), then the same head and tensor checks as
// the `cuda` backend, a Plan (bshd when every row is one document at its start, thd with ragged
// offsets otherwise), the band of cudnn_band.hpp, and cudnn_sdpa.hpp on the device.
//
// unsupported() is honest and complete: it computes the plan (metadata twin, on the
// host), applies cudnn_support.hpp's limits for this cuDNN version and compute
// capability, then asks the frontend to build the graph (cached), so that a problem
// it passes is one attention() runs. Invalid inputs are not "unsupported": they reach
// attention(), which returns their error codes like every other backend.
// Checked by the conformance properties on the `cudnn` backend (scripts/gpu-check).
#include <cudnn_frontend_version.h>

#include <climits>

#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "cudnn_backend.hpp"
#include "cudnn_sdpa.hpp"

namespace attn_oracle::inline backends {
namespace {

int device_dtype(Dtype dtype) { return dtype == Dtype::bf16 ? gpu::kBf16 : gpu::kFp16; }

std::vector<uint16_t> to_storage(const std::vector<double>& x, int dtype) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = gpu::to_storage_bits(static_cast<float>(x[i]), dtype);
  return bits;
}

void widen(const std::vector<uint16_t>& bits, int dtype, double* to) {
  if (to == nullptr) return;
  for (size_t i = 0; i < bits.size(); ++i) to[i] = gpu::from_storage_bits(bits[i], dtype);
}

// Lengths and int32 offsets must fit cuDNN's int32 tensors.
std::optional<std::string> int32_limits(const cudnn::Plan& plan, const AttentionShape& shape) {
  if (plan.s_max_q > INT_MAX || plan.s_max_kv > INT_MAX) return "a document longer than INT_MAX tokens";
  if (!cudnn::ragged_offsets_int64(cudnn::current_platform()) &&
      std::max(plan.total_q * shape.heads_q, plan.total_kv * shape.heads_kv) * shape.head_dim > INT_MAX)
    return "ragged offsets past INT_MAX elements need cuDNN 9.6 (int64 offsets)";
  return std::nullopt;
}

class CudnnBackend final : public Backend, AttentionCapability {
 public:
  std::string name() const override { return "cudnn"; }
  std::string version() const override {
    const cudnn::Platform& p = cudnn::current_platform();
    return "cuDNN " + cudnn::version_string(p.version) + " SDPA, frontend " +
           std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
           std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + ", on " + p.device + " (sm_" + std::to_string(p.cc_major) +
           std::to_string(p.cc_minor) + ")";
  }
  std::string arch() const override {
    const cudnn::Platform& p = cudnn::current_platform();
    return "sm_" + std::to_string(p.cc_major) + std::to_string(p.cc_minor);
  }
  AttentionCapability* attention() override { return this; }

  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    const cudnn::Platform& p = cudnn::current_platform();
    if (p.version == 0) return "no CUDA device, or libcudnn cannot be loaded";
    if (!validate_attention(problem)) return std::nullopt;  // invalid: attention() reports the code
    if (auto e = gpu::check_heads(problem.shape); e && e->code == ErrorCode::unsupported) return e->message;
    Expected<Metadata> md = gpu::metadata_twin(problem.batch);
    if (!md) return std::nullopt;
    return unsupported_with(problem, md.value());
  }

  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& inputs) override {
    Expected<Run> run = run_on_device(problem, inputs, nullptr);
    if (!run) return run.error();
    AttentionResult result;
    result.o.assign(run->out.o.size(), 0.0);
    result.lse.assign(run->out.lse.size(), 0.0);
    Buffers out{result.o.data(), result.lse.data()};
    if (problem.shape.backward) {
      result.grads.emplace();
      result.grads->dq.assign(run->out.dq.size(), 0.0);
      result.grads->dk.assign(run->out.dk.size(), 0.0);
      result.grads->dv.assign(run->out.dv.size(), 0.0);
      out.dq = result.grads->dq.data(), out.dk = result.grads->dk.data(), out.dv = result.grads->dv.data();
    }
    scatter(run.value(), out);
    return result;
  }

  bool supports_attention_into() const override { return true; }
  std::optional<Error> attention_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                      const Buffers& out) override {
    Expected<Run> run = run_on_device(problem, inputs, &out);
    if (!run) return run.error();
    scatter(run.value(), out);
    return std::nullopt;
  }

 private:
  struct Run {
    cudnn::SdpaCall call;
    cudnn::SdpaOutputs out;
    int64_t rows = 0, q_len = 0;
  };

  std::optional<std::string> unsupported_with(const AttentionProblem& problem, const Metadata& md) {
    const int64_t rows = shape_product(md.extra) * md.batch;
    const cudnn::Plan plan = cudnn::make_plan(md, rows, problem.batch.q.segment_ids.shape.back(),
                                              problem.batch.kv.segment_ids.shape.back());
    const cudnn::Band band = cudnn::band_for(problem.batch.mask, problem.batch.window);
    if (auto reason = cudnn::unsupported(cudnn::current_platform(), problem.shape, band, plan.layout)) return reason;
    if (auto reason = int32_limits(plan, problem.shape)) return reason;
    return cudnn::graph_unsupported(plan, problem.shape, band);
  }

  // A null caller buffer the problem needs is bad_tensor_shape, as in the twin.
  static std::optional<Error> missing_output(const Buffers& b, bool q, bool kv, bool backward) {
    if ((q && (!b.o || !b.lse)) || (backward && ((q && !b.dq) || (kv && (!b.dk || !b.dv)))))
      return Error{ErrorCode::bad_tensor_shape, "an output buffer the problem needs is null"};
    return std::nullopt;
  }

  Expected<Run> run_on_device(const AttentionProblem& problem, const AttentionInputs& inputs, const Buffers* caller) {
    Expected<Metadata> md = gpu::metadata_cuda(problem.batch);  // also "no CUDA device"
    if (!md) return md.error();
    const AttentionShape& shape = problem.shape;
    if (auto e = gpu::check_heads(shape)) return *e;
    Run run;
    run.rows = shape_product(md->extra) * md->batch;
    run.q_len = problem.batch.q.segment_ids.shape.back();
    const int64_t kv_len = problem.batch.kv.segment_ids.shape.back();
    const int64_t q_elems = run.rows * run.q_len * shape.heads_q * shape.head_dim;
    const int64_t kv_elems = run.rows * kv_len * shape.heads_kv * shape.head_dim;
    if (auto e = gpu::check_tensor_size("q", inputs.q, q_elems)) return *e;
    if (auto e = gpu::check_tensor_size("k", inputs.k, kv_elems)) return *e;
    if (auto e = gpu::check_tensor_size("v", inputs.v, kv_elems)) return *e;
    if (auto e = gpu::check_tensor_size("do", inputs.d_o, shape.backward ? q_elems : 0)) return *e;
    if (caller)
      if (auto e = missing_output(*caller, q_elems > 0, kv_elems > 0, shape.backward)) return *e;
    if (cudnn::current_platform().version == 0)
      return Error{ErrorCode::unsupported, "no CUDA device, or libcudnn cannot be loaded"};
    if (auto reason = unsupported_with(problem, md.value())) return Error{ErrorCode::unsupported, *reason};

    const int dtype = device_dtype(shape.dtype);
    run.call.plan = cudnn::make_plan(md.value(), run.rows, run.q_len, kv_len);
    run.call.shape = shape;
    run.call.band = cudnn::band_for(problem.batch.mask, problem.batch.window);
    run.call.q = to_storage(inputs.q, dtype);
    run.call.k = to_storage(inputs.k, dtype);
    run.call.v = to_storage(inputs.v, dtype);
    if (shape.backward) run.call.d_o = to_storage(inputs.d_o, dtype);
    if (!cudnn::sdpa_on_device(run.call, run.out))
      return Error{ErrorCode::unsupported, std::string(run.out.declined ? "cuDNN declined: " : "cuDNN failure: ") +
                                               run.out.failure};
    return run;
  }

  // Device layouts -> the seam's (lse [Hq, R*Tq] -> [R, Hq, Tq]).
  static void scatter(const Run& run, const Buffers& out) {
    const int dtype = device_dtype(run.call.shape.dtype);
    const int64_t hq = run.call.shape.heads_q, total_q = run.rows * run.q_len;
    widen(run.out.o, dtype, out.o);
    if (out.lse)
      for (int64_t r = 0; r < run.rows; ++r)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < run.q_len; ++i)
            out.lse[(r * hq + h) * run.q_len + i] = run.out.lse[h * total_q + r * run.q_len + i];
    if (!run.call.shape.backward) return;
    widen(run.out.dq, dtype, out.dq);
    widen(run.out.dk, dtype, out.dk);
    widen(run.out.dv, dtype, out.dv);
  }
};

}  // namespace

void register_cudnn_backend(BackendRegistry& registry) {
  if (cudnn::current_platform().version > 0)
    registry.add("cudnn", [] { return std::unique_ptr<Backend>(new CudnnBackend()); });
}

std::string cudnn_backend_note() {
  const cudnn::Platform& p = cudnn::current_platform();
  if (p.device.empty()) return "cudnn: not registered (no CUDA device on this machine)";
  if (p.version == 0) return "cudnn: not registered (libcudnn could not be loaded)";
  return "";
}

}  // namespace attn_oracle::backends
