// convention_mocks.cpp: see convention_mocks.hpp. Each mock's kernel is a plain
// float64 loop nest over one stack's arguments; nothing here reads our mask kinds.
#include "planted/convention_mocks.hpp"

#include "planted/planted_backends.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn_oracle/adapters/cudnn.hpp"
#include "attn_oracle/adapters/flash_attention.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::planted {
namespace {

namespace fa = adapters::flash_attention;
namespace cudnn = adapters::cudnn;

// Softmax attention of one query row over the keys `allowed(j)`, j < n, in
// float64: writes o[0, d) and returns the lse, -inf (o = 0) when none is allowed.
// key(j) and value(j) point at key j's head vector.
template <class Allowed, class KeyAt, class ValueAt>
double attend(const double* q, int64_t d, double scale, int64_t n, Allowed allowed, KeyAt key, ValueAt value,
              double* o) {
  std::vector<double> s;
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < n; ++j) {
    if (!allowed(j)) continue;
    double dot = 0.0;
    for (int64_t c = 0; c < d; ++c) dot += q[c] * key(j)[c];
    s.push_back(scale * dot);
    keys.push_back(j);
  }
  std::fill(o, o + d, 0.0);
  if (keys.empty()) return -INFINITY;
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (size_t k = 0; k < keys.size(); ++k)
    for (int64_t c = 0; c < d; ++c) o[c] += s[k] / sum * value(keys[k])[c];
  return m + std::log(sum);
}

std::vector<double> gather(const std::vector<double>& x, const std::vector<int64_t>& tokens, int64_t width) {
  std::vector<double> out;
  out.reserve(tokens.size() * width);
  for (int64_t t : tokens) out.insert(out.end(), x.begin() + t * width, x.begin() + (t + 1) * width);
  return out;
}

// ------------------------------------------------------------------ FlashAttention's conventions
struct FlashOutputs {
  std::vector<double> out;          // [total_q, Hq, D]
  std::vector<double> softmax_lse;  // [Hq, total_q]; +inf where a query attends nothing
};

// flash_attn_varlen_func's forward on packed q [total_q, Hq, D], k and v [total_k, Hkv, D].
FlashOutputs flash_varlen_forward(const fa::VarlenParams& p, const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, int64_t hq, int64_t hkv, int64_t d, double scale,
                                  bool causal_top_left) {
  int64_t left = p.window_left, right = p.causal ? 0 : p.window_right;
  if (p.version == fa::Version::fa2) {  // its API's -1 rule
    if (left >= p.max_seqlen_k) left = -1;
    if (right >= p.max_seqlen_k) right = -1;
    if (left < 0 && right >= 0) left = p.max_seqlen_k;
    else if (left >= 0 && right < 0) right = p.max_seqlen_k;
  }
  const int64_t total_q = p.cu_seqlens_q.back();
  FlashOutputs r{std::vector<double>(total_q * hq * d), std::vector<double>(hq * total_q)};
  for (size_t doc = 0; doc + 1 < p.cu_seqlens_q.size(); ++doc) {
    const int64_t q0 = p.cu_seqlens_q[doc], lq = p.cu_seqlens_q[doc + 1] - q0;
    const int64_t k0 = p.cu_seqlens_k[doc], lk = p.cu_seqlens_k[doc + 1] - k0;
    for (int64_t i = 0; i < lq; ++i) {
      // The diagonal at the bottom-right of the document (the planted mistake: top-left).
      const int64_t diagonal = causal_top_left && p.causal ? i : i + lk - lq;
      auto allowed = [&](int64_t j) { return (right < 0 || j <= diagonal + right) && (left < 0 || j >= diagonal - left); };
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kvh = h / (hq / hkv);
        auto key = [&](int64_t j) { return &k[((k0 + j) * hkv + kvh) * d]; };
        auto value = [&](int64_t j) { return &v[((k0 + j) * hkv + kvh) * d]; };
        const double lse = attend(&q[((q0 + i) * hq + h) * d], d, scale, lk, allowed, key, value,
                                  &r.out[((q0 + i) * hq + h) * d]);
        r.softmax_lse[h * total_q + q0 + i] = std::isinf(lse) ? INFINITY : lse;
      }
    }
  }
  return r;
}

class FlashMock final : public Backend, AttentionCapability {
 public:
  FlashMock(std::string name, ConventionMistakes m, fa::Version v) : name_(std::move(name)), mistakes_(m), version_(v) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "mock float64 kernel in FlashAttention's varlen conventions"; }
  AttentionCapability* attention() override { return this; }

  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    if (!validate_attention(problem)) return std::nullopt;  // attention() reports the error
    const auto call = fa::to_flash_attention(problem.batch, version_);
    if (!call) return "FlashAttention adapter: " + call.error().message;
    return std::nullopt;
  }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& in) override {
    const auto sizes = validate_attention(problem, &in);
    if (!sizes) return sizes.error();
    const auto call = fa::to_flash_attention(problem.batch, version_);
    if (!call) return call.error();
    const int64_t hq = sizes->heads_q, hkv = sizes->heads_kv, d = sizes->head_dim;
    const FlashOutputs fwd = flash_varlen_forward(
        call->params, gather(in.q, call->q_tokens, hq * d), gather(in.k, call->kv_tokens, hkv * d),
        gather(in.v, call->kv_tokens, hkv * d), hq, hkv, d, problem.shape.effective_scale(), mistakes_.flash_causal_top_left);
    AttentionResult r = fa::outputs_to_ours(call.value(), fwd.out, fwd.softmax_lse, sizes.value());
    return with_reference_gradients(std::move(r), problem, in);
  }

 private:
  std::string name_;
  ConventionMistakes mistakes_;
  fa::Version version_;
};

// ------------------------------------------------------------------ cuDNN's conventions
class CudnnMock final : public Backend, AttentionCapability {
 public:
  CudnnMock(std::string name, ConventionMistakes m) : name_(std::move(name)), mistakes_(m) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "mock float64 kernel in cuDNN SDPA's ragged conventions"; }
  AttentionCapability* attention() override { return this; }

  std::optional<std::string> unsupported(const AttentionProblem& problem) override {
    if (!validate_attention(problem)) return std::nullopt;
    const auto p = cudnn::to_cudnn(problem.batch);
    if (!p) return "cuDNN adapter: " + p.error().message;
    return std::nullopt;
  }
  Expected<AttentionResult> attention(const AttentionProblem& problem, const AttentionInputs& in) override {
    const auto sizes = validate_attention(problem, &in);
    if (!sizes) return sizes.error();
    auto call = cudnn::to_cudnn(problem.batch);  // offsets in tokens of our own [R * T] tensors
    if (!call) return call.error();
    cudnn::SdpaRaggedParams* p = &call.value();
    if (mistakes_.cudnn_left_bound_unshifted && p->left_bound) --*p->left_bound;
    const int64_t hq = sizes->heads_q, hkv = sizes->heads_kv, d = sizes->head_dim, tq = sizes->q_len;
    AttentionResult r;
    r.o.assign(sizes->q_elems(), 0.0);
    r.lse.assign(sizes->lse_elems(), -INFINITY);
    for (size_t b = 0; b < p->seq_len_q.size(); ++b) {
      const int64_t s_q = p->seq_len_q[b], s_kv = p->seq_len_kv[b];
      const int64_t q0 = p->ragged_offset_q[b], k0 = p->ragged_offset_kv[b];
      const int64_t shift = p->alignment == cudnn::DiagonalAlignment::bottom_right ? s_kv - s_q : 0;
      for (int64_t row = 0; row < s_q; ++row) {
        auto allowed = [&](int64_t c) {
          return (!p->right_bound || c <= row + shift + *p->right_bound) &&
                 (!p->left_bound || c > row + shift - *p->left_bound);
        };
        const int64_t t = q0 + row;
        for (int64_t h = 0; h < hq; ++h) {
          const int64_t kvh = h / (hq / hkv);
          auto key = [&](int64_t c) { return &in.k[((k0 + c) * hkv + kvh) * d]; };
          auto value = [&](int64_t c) { return &in.v[((k0 + c) * hkv + kvh) * d]; };
          r.lse[((t / tq) * hq + h) * tq + t % tq] = attend(&in.q[(t * hq + h) * d], d, problem.shape.effective_scale(),
                                                            s_kv, allowed, key, value, &r.o[(t * hq + h) * d]);
        }
      }
    }
    return with_reference_gradients(std::move(r), problem, in);
  }

 private:
  std::string name_;
  ConventionMistakes mistakes_;
};

}  // namespace

std::unique_ptr<Backend> flash_attention_mock(std::string name, ConventionMistakes mistakes, fa::Version version) {
  return std::make_unique<FlashMock>(std::move(name), mistakes, version);
}

std::unique_ptr<Backend> cudnn_mock(std::string name, ConventionMistakes mistakes) {
  return std::make_unique<CudnnMock>(std::move(name), mistakes);
}

std::vector<PlantedBug> convention_bugs() {
  auto bug = [](std::string name, std::string what, std::function<std::unique_ptr<Backend>()> make) {
    return PlantedBug{name, "attention/matchesReference", what, std::move(make)};
  };
  return {
      bug("flash_causal_read_top_left",
          "a mock kernel in FlashAttention's conventions that reads causal=True as top-left (j <= i) instead of "
          "bottom-right per document",
          [] { return flash_attention_mock("planted-flash_causal_read_top_left", {.flash_causal_top_left = true}); }),
      bug("cudnn_left_bound_unshifted",
          "a mock kernel in cuDNN's conventions handed our window left as its exclusive left bound, not left + 1",
          [] { return cudnn_mock("planted-cudnn_left_bound_unshifted", {.cudnn_left_bound_unshifted = true}); }),
  };
}

}  // namespace attn_oracle::planted
