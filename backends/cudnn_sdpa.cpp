// cudnn_sdpa.cpp: see cudnn_sdpa.hpp. The graphs, in the frontend's terms:
//   forward   sdpa(Q, K, V) -> O, Stats; generate_stats, padding mask with
//             seq_len_q / seq_len_kv, the band of cudnn_band.hpp, attn_scale.
//   backward  sdpa_backward(Q, K, V, O, dO, Stats) -> dQ, dK, dV, same options.
// Tensors are [B, H, S, D] with BSHD strides (B*S*H*D storage, S = T) or, for thd,
// the same strides over s_max plus a ragged offset tensor [B+1, 1, 1, 1] per tensor
// (elements; int64 from cuDNN 9.6). Stats are packed [B, Hq, s_max, 1] float.
// Device buffers get s_max * H * D zero elements of slack past the end, in case a
// kernel's tile loads reach past the last document (they must never be read).
#include "cudnn_sdpa.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cudnn_frontend.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device_array.cuh"
#include "event_timer.cuh"

namespace attn_oracle::inline backends::cudnn {
namespace {

namespace fe = cudnn_frontend;
using gpu::DeviceArray;
using gpu::median_event_ms;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv, kOffQ, kOffK, kOffV, kOffO,
  kDo, kDq, kDk, kDv, kOffDo, kOffDq, kOffDk, kOffDv,
};

// Everything a graph depends on; values (lengths, offsets, data) are not in it.
struct Key {
  int layout = 0;
  int64_t docs = 0, heads_q = 0, heads_kv = 0, head_dim = 0, s_max_q = 0, s_max_kv = 0;
  int dtype = 0;
  bool bottom_right = false;
  int64_t left = -1, right = -1;
  uint32_t scale_bits = 0;
  bool backward = false;
  auto operator<=>(const Key&) const = default;
};

Key key_of(const Plan& plan, const AttentionShape& shape, const Band& band) {
  Key key;
  key.layout = static_cast<int>(plan.layout);
  key.docs = plan.docs, key.heads_q = shape.heads_q, key.heads_kv = shape.heads_kv, key.head_dim = shape.head_dim;
  key.s_max_q = plan.s_max_q, key.s_max_kv = plan.s_max_kv;
  key.dtype = static_cast<int>(shape.dtype);
  key.bottom_right = band.bottom_right;
  key.left = band.left_bound.value_or(-1), key.right = band.right_bound.value_or(-1);
  const float scale = static_cast<float>(shape.effective_scale());
  std::memcpy(&key.scale_bits, &scale, sizeof scale);
  key.backward = shape.backward;
  return key;
}

struct Graphs {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t workspace = 0;  // the larger of the two
  std::string failure;    // the frontend's reason, empty when both built
};

// One handle for the process, on the default stream.
cudnnHandle_t handle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t created = nullptr;
    if (cudnnCreate(&created) != CUDNN_STATUS_SUCCESS) created = nullptr;
    return created;
  }();
  return h;
}

// ------------------------------------------------------------------ graph building

struct Builder {
  const Key& key;
  bool int64_offsets;
  fe::graph::Graph& g;

  TensorPtr int_tensor(const char* name, int64_t uid, int64_t n, fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1}).set_data_type(type));
  }
  TensorPtr offsets(const char* name, int64_t uid) {
    if (key.layout != static_cast<int>(Layout::thd)) return nullptr;
    return int_tensor(name, uid, key.docs + 1, int64_offsets ? fe::DataType_t::INT64 : fe::DataType_t::INT32);
  }
  // [B, H, S, D] with BSHD strides.
  void shape(fe::graph::Tensor_attributes& t, int64_t heads, int64_t s) {
    const int64_t d = key.head_dim;
    t.set_dim({key.docs, heads, s, d}).set_stride({s * heads * d, d, heads * d, 1});
  }
  TensorPtr input(const char* name, int64_t uid, int64_t heads, int64_t s, TensorPtr ragged) {
    fe::graph::Tensor_attributes t;
    t.set_name(name).set_uid(uid);
    shape(t, heads, s);
    if (ragged) t.set_ragged_offset(ragged);
    return g.tensor(t);
  }
  void output(const TensorPtr& t, int64_t uid, int64_t heads, int64_t s, TensorPtr ragged) {
    t->set_output(true).set_uid(uid);
    shape(*t, heads, s);
    if (ragged) t->set_ragged_offset(ragged);
  }
  TensorPtr stats(int64_t uid) {
    const int64_t h = key.heads_q, s = key.s_max_q;
    return g.tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(uid).set_dim({key.docs, h, s, 1})
                        .set_stride({h * s, s, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
  }
};

template <class Attributes>
void apply_band(Attributes& a, const Key& key) {
  a.set_diagonal_alignment(key.bottom_right ? fe::DiagonalAlignment_t::BOTTOM_RIGHT : fe::DiagonalAlignment_t::TOP_LEFT);
  if (key.right >= 0) a.set_diagonal_band_right_bound(static_cast<int>(key.right));
  if (key.left >= 0) a.set_diagonal_band_left_bound(static_cast<int>(key.left));
}

std::shared_ptr<fe::graph::Graph> new_graph(const Key& key) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(key.dtype == static_cast<int>(Dtype::bf16) ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float scale_of(const Key& key) {
  float scale;
  std::memcpy(&scale, &key.scale_bits, sizeof scale);
  return scale;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Key& key, bool int64_offsets) {
  auto g = new_graph(key);
  Builder b{key, int64_offsets, *g};
  auto q = b.input("q", kQ, key.heads_q, key.s_max_q, b.offsets("off_q", kOffQ));
  auto k = b.input("k", kK, key.heads_kv, key.s_max_kv, b.offsets("off_k", kOffK));
  auto v = b.input("v", kV, key.heads_kv, key.s_max_kv, b.offsets("off_v", kOffV));
  fe::graph::SDPA_attributes a;
  a.set_name("sdpa").set_generate_stats(true).set_attn_scale(scale_of(key)).set_padding_mask(true)
      .set_seq_len_q(b.int_tensor("seq_q", kSeqQ, key.docs, fe::DataType_t::INT32))
      .set_seq_len_kv(b.int_tensor("seq_kv", kSeqKv, key.docs, fe::DataType_t::INT32));
  apply_band(a, key);
  auto [o, stats] = g->sdpa(q, k, v, a);
  b.output(o, kO, key.heads_q, key.s_max_q, b.offsets("off_o", kOffO));
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT)
      .set_dim({key.docs, key.heads_q, key.s_max_q, 1}).set_stride({key.heads_q * key.s_max_q, key.s_max_q, 1, 1});
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Key& key, bool int64_offsets) {
  auto g = new_graph(key);
  Builder b{key, int64_offsets, *g};
  auto q = b.input("q", kQ, key.heads_q, key.s_max_q, b.offsets("off_q", kOffQ));
  auto k = b.input("k", kK, key.heads_kv, key.s_max_kv, b.offsets("off_k", kOffK));
  auto v = b.input("v", kV, key.heads_kv, key.s_max_kv, b.offsets("off_v", kOffV));
  auto o = b.input("o", kO, key.heads_q, key.s_max_q, b.offsets("off_o", kOffO));
  auto d_o = b.input("do", kDo, key.heads_q, key.s_max_q, b.offsets("off_do", kOffDo));
  fe::graph::SDPA_backward_attributes a;
  a.set_name("sdpa_backward").set_attn_scale(scale_of(key)).set_padding_mask(true)
      .set_seq_len_q(b.int_tensor("seq_q", kSeqQ, key.docs, fe::DataType_t::INT32))
      .set_seq_len_kv(b.int_tensor("seq_kv", kSeqKv, key.docs, fe::DataType_t::INT32));
  apply_band(a, key);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, b.stats(kStats), a);
  b.output(dq, kDq, key.heads_q, key.s_max_q, b.offsets("off_dq", kOffDq));
  b.output(dk, kDk, key.heads_kv, key.s_max_kv, b.offsets("off_dk", kOffDk));
  b.output(dv, kDv, key.heads_kv, key.s_max_kv, b.offsets("off_dv", kOffDv));
  return g;
}

// validate, operation graph, heuristics (A, then the fallback list), support check,
// plans; the reason on failure.
std::string build(fe::graph::Graph& g, int64_t& workspace) {
  fe::error_t status = g.build(handle(), {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (status.is_bad()) return status.get_message();
  int64_t size = 0;
  status = g.get_workspace_size(size);
  if (status.is_bad()) return status.get_message();
  workspace = std::max(workspace, size);
  return {};
}

Graphs build_graphs(const Key& key) {
  Graphs out;
  if (!handle()) {
    out.failure = "cudnnCreate failed (no device, or libcudnn cannot be loaded)";
    return out;
  }
  const bool int64_offsets = ragged_offsets_int64(current_platform());
  try {
    out.fwd = forward_graph(key, int64_offsets);
    out.failure = build(*out.fwd, out.workspace);
    if (out.failure.empty() && key.backward) {
      out.bwd = backward_graph(key, int64_offsets);
      out.failure = build(*out.bwd, out.workspace);
      if (!out.failure.empty()) out.failure = "backward: " + out.failure;
    }
  } catch (const std::exception& e) {  // the frontend throws on some malformed graphs
    out.failure = e.what();
  }
  return out;
}

// Built once per key; kept for the process (a property run draws a few hundred keys).
const Graphs& graphs_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Graphs>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, std::make_unique<Graphs>(build_graphs(key))).first;
  return *it->second;
}

// ------------------------------------------------------------------ execution

std::vector<uint16_t> padded(const std::vector<uint16_t>& x, size_t slack) {
  std::vector<uint16_t> out(x.size() + slack, 0);
  std::copy(x.begin(), x.end(), out.begin());
  return out;
}

// Offsets as the device wants them: int64, or int32 before cuDNN 9.6.
struct OffsetArray {
  DeviceArray<int64_t> wide;
  DeviceArray<int32_t> narrow;
  explicit OffsetArray(const std::vector<int64_t>& values, bool int64_offsets)
      : wide(int64_offsets ? values.size() : 0), narrow(int64_offsets ? 0 : values.size()) {
    if (int64_offsets) {
      ok_ = wide.ok() && wide.upload(values);
    } else {
      std::vector<int32_t> v(values.begin(), values.end());
      ok_ = narrow.ok() && narrow.upload(v);
    }
  }
  void* ptr() { return wide.size ? static_cast<void*>(wide.ptr) : static_cast<void*>(narrow.ptr); }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

bool fail(SdpaOutputs& out, const std::string& what) {
  out.failure = what + ": " + cudaGetErrorString(cudaGetLastError());
  return false;
}

}  // namespace

const Platform& current_platform() {
  static const Platform platform = [] {
    Platform p;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      return p;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return p;
    p.cc_major = prop.major, p.cc_minor = prop.minor, p.device = prop.name;
    p.version = static_cast<int64_t>(cudnnGetVersion());
    return p;
  }();
  return platform;
}

std::optional<std::string> graph_unsupported(const Plan& plan, const AttentionShape& shape, const Band& band) {
  if (plan.docs == 0) return std::nullopt;  // nothing reaches cuDNN
  const Graphs& graphs = graphs_for(key_of(plan, shape, band));
  if (graphs.failure.empty()) return std::nullopt;
  return "the cuDNN frontend declines this graph (" + describe(plan) + "): " + graphs.failure;
}

bool sdpa_on_device(const SdpaCall& call, SdpaOutputs& out) {
  const Plan& plan = call.plan;
  const AttentionShape& s = call.shape;
  const int64_t d = s.head_dim, hq = s.heads_q, hkv = s.heads_kv;
  const size_t q_elems = static_cast<size_t>(plan.total_q * hq * d), kv_elems = static_cast<size_t>(plan.total_kv * hkv * d);
  out.o.assign(q_elems, 0);
  out.lse.assign(static_cast<size_t>(hq * plan.total_q), -std::numeric_limits<float>::infinity());
  if (s.backward) out.dq.assign(q_elems, 0), out.dk.assign(kv_elems, 0), out.dv.assign(kv_elems, 0);
  if (plan.docs == 0) return true;  // no document: o = 0, lse = -inf, grads 0

  const Graphs& graphs = graphs_for(key_of(plan, s, call.band));
  if (!graphs.failure.empty()) {
    out.declined = true;
    out.failure = graphs.failure;
    return false;
  }
  const bool wide = ragged_offsets_int64(current_platform());
  const size_t q_slack = static_cast<size_t>(plan.s_max_q * hq * d), kv_slack = static_cast<size_t>(plan.s_max_kv * hkv * d);
  DeviceArray<uint16_t> q(q_elems + q_slack), k(kv_elems + kv_slack), v(kv_elems + kv_slack), o(q_elems + q_slack);
  DeviceArray<float> stats(static_cast<size_t>(plan.docs * hq * plan.s_max_q));
  DeviceArray<int32_t> seq_q(plan.seq_len_q.size()), seq_kv(plan.seq_len_kv.size());
  OffsetArray off_q(element_offsets(plan.token_offset_q, hq, d), wide);
  OffsetArray off_kv(element_offsets(plan.token_offset_kv, hkv, d), wide);
  DeviceArray<int8_t> workspace(static_cast<size_t>(graphs.workspace));
  if (!q.ok() || !k.ok() || !v.ok() || !o.ok() || !stats.ok() || !seq_q.ok() || !seq_kv.ok() || !off_q.ok() ||
      !off_kv.ok() || !workspace.ok())
    return fail(out, "device allocation or upload of the forward");
  if (!q.upload(padded(call.q, q_slack)) || !k.upload(padded(call.k, kv_slack)) || !v.upload(padded(call.v, kv_slack)) ||
      !o.zero() || !seq_q.upload(plan.seq_len_q) || !seq_kv.upload(plan.seq_len_kv))
    return fail(out, "upload of the forward inputs");

  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.ptr}, {kK, k.ptr}, {kV, v.ptr}, {kO, o.ptr}, {kStats, stats.ptr}, {kSeqQ, seq_q.ptr}, {kSeqKv, seq_kv.ptr}};
  const bool thd = plan.layout == Layout::thd;
  auto bind = [&](int64_t uid, OffsetArray& side) {
    if (thd) pack[uid] = side.ptr();
  };
  bind(kOffQ, off_q), bind(kOffK, off_kv), bind(kOffV, off_kv), bind(kOffO, off_q);
  std::string refused;  // the frontend's message when an execute fails
  auto run = [&](fe::graph::Graph& g) {
    fe::error_t status = g.execute(handle(), pack, workspace.ptr);
    if (status.is_bad()) refused = status.get_message();
    return status.is_good();
  };
  auto forward = [&] { return run(*graphs.fwd); };
  if (!forward()) return fail(out, "cuDNN SDPA forward execute (" + refused + ")");
  if (cudaDeviceSynchronize() != cudaSuccess) return fail(out, "cuDNN SDPA forward");
  std::vector<float> stats_host;
  if (!o.download(out.o) || !stats.download(stats_host)) return fail(out, "download of the forward outputs");
  out.o.resize(q_elems);
  out.lse = lse_from_stats(plan, hq, stats_host);
  if (call.timing_reps > 0) out.fwd_ms = median_event_ms(call.timing_reps, forward);
  if (!s.backward) return true;

  DeviceArray<uint16_t> d_o(q_elems + q_slack), dq(q_elems + q_slack), dk(kv_elems + kv_slack), dv(kv_elems + kv_slack);
  if (!d_o.ok() || !dq.ok() || !dk.ok() || !dv.ok() || !d_o.upload(padded(call.d_o, q_slack)) || !dq.zero() ||
      !dk.zero() || !dv.zero())
    return fail(out, "device allocation or upload of the backward");
  pack[kDo] = d_o.ptr, pack[kDq] = dq.ptr, pack[kDk] = dk.ptr, pack[kDv] = dv.ptr;
  bind(kOffDo, off_q), bind(kOffDq, off_q), bind(kOffDk, off_kv), bind(kOffDv, off_kv);
  auto backward = [&] { return run(*graphs.bwd); };
  if (!backward()) return fail(out, "cuDNN SDPA backward execute (" + refused + ")");
  if (cudaDeviceSynchronize() != cudaSuccess) return fail(out, "cuDNN SDPA backward");
  if (!dq.download(out.dq) || !dk.download(out.dk) || !dv.download(out.dv)) return fail(out, "download of the gradients");
  out.dq.resize(q_elems), out.dk.resize(kv_elems), out.dv.resize(kv_elems);
  if (call.timing_reps > 0) out.bwd_ms = median_event_ms(call.timing_reps, backward);
  return true;
}

}  // namespace attn_oracle::backends::cudnn
