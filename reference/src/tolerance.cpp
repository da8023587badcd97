// tolerance.cpp: the same-precision naive attention and the tolerance rule of
// docs/semantics.md#6-tolerance. See tolerance.hpp for the contract.
//
// The naive computation is what a plain device implementation does, so that
// max|naive - ref64| measures the error the dtype itself forces:
//  - S = q . k as an fp32 sum over the head dim, times the scale in fp32;
//  - softmax in fp32 over the allowed keys (max subtracted), P normalised and then
//    rounded to the dtype, as it is before it meets V on the tensor cores;
//  - O = P V accumulated in fp32, rounded to the dtype; lse = max + log(sum) fp32;
//  - backward in fp32 from the fp32 P and the *rounded* O (what the device
//    stored), dq / dk / dv rounded to the dtype at the end.
// A query that attends nothing gives o = 0, lse = -inf, dq = 0 here too.
//
// Tested by tests/tolerance_test.cpp.
#include "attn_oracle/reference/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "attention_tiles.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline reference {

// ---------------------------------------------------------------------------
// The absolute floor
// ---------------------------------------------------------------------------

// About two units of rounding of the type at magnitude 1 (attention outputs and
// gradients on the generator's [-1, 1) data are O(1)): fp16 u = 2^-11 = 4.9e-4,
// so 1e-3; bf16 u = 2^-8 = 3.9e-3, so 8e-3. fp32's u = 6e-8 is far below what a
// different summation order costs, so its floor is set by that instead: a
// random-walk sum of 4096 O(1) terms drifts by about sqrt(4096) u = 4e-6 < 1e-5.
double tolerance_floor(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return 1e-5;
    case Dtype::fp16: return 1e-3;
    case Dtype::bf16: return 8e-3;
  }
  return 1e-5;
}

// ---------------------------------------------------------------------------
// Same-precision naive attention
// ---------------------------------------------------------------------------

namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// Rounding again is a no-op on rounded inputs and guarantees the naive run sees
// exactly what the device was given; the dtypes all fit in a float exactly.
std::vector<float> to_device(const std::vector<double>& t, Dtype dtype) {
  std::vector<float> out(t.size());
  for (size_t i = 0; i < t.size(); ++i) out[i] = static_cast<float>(round_to_dtype(t[i], dtype));
  return out;
}

std::vector<double> stored_as(const std::vector<float>& t, Dtype dtype) {
  std::vector<double> out(t.size());
  for (size_t i = 0; i < t.size(); ++i) out[i] = round_to_dtype(t[i], dtype);
  return out;
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

// The queries of a row that attend something, in groups that share no key
// (joined by the span of the keys they attend: a document, and any other it
// shares a key with), each in query order.
std::vector<std::vector<int64_t>> independent_query_groups(const ref::RowMask& mask) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < mask.q_len; ++i)
    if (mask.attends(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return mask.keys_begin(a)->first < mask.keys_begin(b)->first; });
  std::vector<std::vector<int64_t>> groups;
  int64_t end = 0;
  for (int64_t i : order) {
    if (groups.empty() || mask.keys_begin(i)->first >= end) groups.emplace_back();
    groups.back().push_back(i);
    end = std::max(end, (mask.keys_end(i) - 1)->end);
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return groups;
}

// Device-style loops over one query at a time, fp32 state: per (row, query
// head), each query's forward and then its backward, reading its attended keys
// off the row's mask in key order.
class NaiveAttention {
 public:
  NaiveAttention(const AttentionProblem& p, const AttentionInputs& in, const AttentionSizes& z)
      : z_(z), dtype_(p.shape.dtype), backward_(p.shape.backward), scale_(static_cast<float>(p.shape.effective_scale())),
        q_(to_device(in.q, dtype_)), k_(to_device(in.k, dtype_)), v_(to_device(in.v, dtype_)),
        d_o_(to_device(in.d_o, dtype_)), dq_(q_.size(), 0.0f), dk_(k_.size(), 0.0f),
        dv_(v_.size(), 0.0f) {}

  // One row's queries of one group, every query head reading kv head g, in head
  // and then query order: the order in which dk and dv of a key are summed
  // whatever the worker count, since no other group reaches that key.
  void run(int64_t r, int64_t g, const std::vector<int64_t>& queries, const ref::RowMask& mask,
           std::vector<float>& p, AttentionResult& out) {
    const int64_t group = z_.heads_q / z_.heads_kv;
    p.resize(mask.kv_len);
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t i : queries) {
        forward(r, h, i, mask, p, out);
        if (backward_) backward(r, h, i, mask, p, out);
      }
  }

  AttentionGradients gradients() const {
    return {stored_as(dq_, dtype_), stored_as(dk_, dtype_), stored_as(dv_, dtype_)};
  }

 private:
  // Writes o and lse of query i, head h, row r; leaves its fp32 P in p (over
  // the attended keys; other entries are stale).
  void forward(int64_t r, int64_t h, int64_t i, const ref::RowMask& mask, std::vector<float>& p,
               AttentionResult& out) const {
    const int64_t D = z_.head_dim;
    float row_max = kNegInfF;
    for (const ref::KeyRun* run = mask.keys_begin(i); run != mask.keys_end(i); ++run)
      for (int64_t j = run->first; j < run->end; ++j) {
        p[j] = scale_ * dot(q_row(r, i, h), kv_row(k_, r, j, h), D);
        row_max = std::max(row_max, p[j]);
      }
    float sum = 0.0f;
    for (const ref::KeyRun* run = mask.keys_begin(i); run != mask.keys_end(i); ++run)
      for (int64_t j = run->first; j < run->end; ++j) sum += p[j] = std::exp(p[j] - row_max);
    std::vector<float> acc(D, 0.0f);
    for (const ref::KeyRun* run = mask.keys_begin(i); run != mask.keys_end(i); ++run)
      for (int64_t j = run->first; j < run->end; ++j) {
        p[j] /= sum;
        const auto p_stored = static_cast<float>(round_to_dtype(p[j], dtype_));
        for (int64_t c = 0; c < D; ++c) acc[c] += p_stored * kv_row(v_, r, j, h)[c];
      }
    const int64_t qi = (r * z_.q_len + i) * z_.heads_q + h;
    for (int64_t c = 0; c < D; ++c) out.o[qi * D + c] = round_to_dtype(acc[c], dtype_);
    out.lse[(r * z_.heads_q + h) * z_.q_len + i] = row_max + std::log(sum);
  }

  // Adds query i's share of dq, dk, dv from its fp32 P and its stored o.
  void backward(int64_t r, int64_t h, int64_t i, const ref::RowMask& mask, const std::vector<float>& p,
                const AttentionResult& out) {
    const int64_t D = z_.head_dim;
    const int64_t qi = ((r * z_.q_len + i) * z_.heads_q + h) * D;
    float delta = 0.0f;
    for (int64_t c = 0; c < D; ++c) delta += d_o_[qi + c] * static_cast<float>(out.o[qi + c]);
    for (const ref::KeyRun* run = mask.keys_begin(i); run != mask.keys_end(i); ++run)
      for (int64_t j = run->first; j < run->end; ++j) {
        const int64_t kj = ((r * z_.kv_len + j) * z_.heads_kv + kv_head(h)) * D;
        const float pij = p[j];
        const float ds = pij * (dot(&d_o_[qi], &v_[kj], D) - delta);
        for (int64_t c = 0; c < D; ++c) {
          dq_[qi + c] += scale_ * ds * k_[kj + c];
          dk_[kj + c] += scale_ * ds * q_[qi + c];
          dv_[kj + c] += pij * d_o_[qi + c];
        }
      }
  }

  int64_t kv_head(int64_t h) const { return h / (z_.heads_q / z_.heads_kv); }
  const float* q_row(int64_t r, int64_t i, int64_t h) const {
    return &q_[((r * z_.q_len + i) * z_.heads_q + h) * z_.head_dim];
  }
  const float* kv_row(const std::vector<float>& t, int64_t r, int64_t j, int64_t h) const {
    return &t[((r * z_.kv_len + j) * z_.heads_kv + kv_head(h)) * z_.head_dim];
  }

  AttentionSizes z_;
  Dtype dtype_;
  bool backward_;
  float scale_;
  std::vector<float> q_, k_, v_, d_o_;
  std::vector<float> dq_, dk_, dv_;
};

}  // namespace

AttentionResult naive_same_precision(const AttentionProblem& problem,
                                     const AttentionInputs& inputs) {
  auto sizes = validate_attention(problem, &inputs);
  if (!sizes) return {};
  const AttentionSizes& z = sizes.value();
  const BatchLayout layout = validate_shapes(problem.batch).value();
  NaiveAttention naive(problem, inputs, z);
  AttentionResult out;
  out.o.assign(z.q_elems(), 0.0);
  out.lse.assign(z.lse_elems(), -std::numeric_limits<double>::infinity());
  // Units (group of queries, kv head) of one row: each writes its own o, lse
  // and dq entries and sums the dk, dv of its own keys.
  std::vector<std::vector<float>> p(ref::tiles::workers_for(z.heads_kv * z.q_len, ref::tiles::work_of(z)));
  for (int64_t r = 0; r < z.rows; ++r) {
    const ref::RowMask mask = ref::explicit_mask(problem.batch, layout, r, /*with_window=*/true);
    const std::vector<std::vector<int64_t>> groups = independent_query_groups(mask);
    const int64_t units = int64_t(groups.size()) * z.heads_kv;
    ref::tiles::for_each_unit(units, std::min(int64_t(p.size()), units), [&](int64_t unit, int64_t w) {
      naive.run(r, unit % z.heads_kv, groups[unit / z.heads_kv], mask, p[w], out);
    });
  }
  if (problem.shape.backward) out.grads = naive.gradients();
  return out;
}

// ---------------------------------------------------------------------------
// The rule
// ---------------------------------------------------------------------------

namespace {

// A failure that no budget can excuse (sizes, NaN, infinities that differ).
ToleranceCheck structural_failure(ToleranceCheck c, int64_t index, double backend,
                                  double reference, std::string detail) {
  c.pass = false;
  c.worst_index = index;
  c.backend_value = backend;
  c.reference_value = reference;
  c.error = c.ratio = std::numeric_limits<double>::infinity();
  c.detail = std::move(detail);
  return c;
}

// max |naive - truth| over finite differences; -1 when the sizes differ.
double naive_error_of(const std::vector<double>& naive, const std::vector<double>& truth) {
  if (naive.size() != truth.size()) return -1.0;
  double e = 0.0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const double d = std::fabs(naive[i] - truth[i]);
    if (std::isfinite(d)) e = std::max(e, d);
  }
  return e;
}

// The unit roundoff of the precision a tensor is computed and stored in.
double unit_roundoff(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return 0x1p-24;
    case Dtype::fp16: return 0x1p-11;
    case Dtype::bf16: return 0x1p-8;
  }
  return 0x1p-24;
}

// The rule's budget grows with the naive run's distance from the float64
// oracle, so a wrong oracle would widen its own tolerance. The naive run is
// computed independently of the oracle and must stay within a few units of
// roundoff of it (relative to the tensor's magnitude); when it does not, the
// oracle is the suspect and nothing is judged against it.
std::optional<std::string> oracle_suspect(const std::vector<double>& ref64, double naive_error, Dtype dtype,
                                          int64_t longest_sum) {
  double magnitude = 1.0;
  for (double x : ref64)
    if (std::isfinite(x)) magnitude = std::max(magnitude, std::fabs(x));
  const double terms = std::max(1.0, double(longest_sum) / kOracleAgreementTerms);
  const double bound = kOracleAgreementUnits * unit_roundoff(dtype) * magnitude * std::sqrt(terms);
  if (naive_error <= bound) return std::nullopt;
  std::ostringstream os;
  os.precision(6);
  os << "oracle suspect: the same-precision naive run is " << naive_error << " off the float64 oracle, more than "
     << kOracleAgreementUnits << " units of roundoff of " << to_string(dtype) << " x max(1, |oracle|)";
  if (terms > 1.0) os << " x sqrt(" << longest_sum << " terms / " << kOracleAgreementTerms << ")";
  os << " = " << bound << " allow; the oracle itself disagrees with an independent computation";
  return os.str();
}

// `backend` against `ref64` within runs x (k x naive_error + eps).
ToleranceCheck compare_within(std::string_view tensor, const std::vector<double>& backend,
                              const std::vector<double>& ref64, double naive_error, double k, Dtype dtype,
                              int runs, int64_t longest_sum) {
  ToleranceCheck c;
  c.tensor = std::string(tensor);
  c.k = k;
  c.runs = runs;
  c.eps = tolerance_floor(dtype);
  c.budget = runs * c.eps;
  if (backend.size() != ref64.size() || naive_error < 0) {
    std::ostringstream os;
    os << "sizes differ: backend " << backend.size() << ", reference " << ref64.size() << " elements"
       << (naive_error < 0 ? " (or the naive computation's)" : "");
    return structural_failure(c, -1, 0.0, 0.0, os.str());
  }
  c.naive_error = naive_error;
  c.budget = runs * (k * c.naive_error + c.eps);
  if (auto suspect = oracle_suspect(ref64, naive_error, dtype, longest_sum))
    return structural_failure(c, -1, 0.0, 0.0, *suspect);
  for (size_t i = 0; i < ref64.size(); ++i) {
    const double b = backend[i], r = ref64[i];
    const auto index = static_cast<int64_t>(i);
    if (std::isnan(b) || std::isnan(r))
      return structural_failure(c, index, b, r,
                                std::isnan(b) ? "NaN in backend" : "NaN in reference");
    if (std::isinf(b) || std::isinf(r)) {
      if (b == r) continue;  // the same infinity: exact match
      return structural_failure(c, index, b, r, "infinities must match exactly");
    }
    const double err = std::fabs(b - r);
    if (c.worst_index < 0 || err > c.error) {
      c.worst_index = index;
      c.error = err;
      c.backend_value = b;
      c.reference_value = r;
    }
  }
  c.ratio = c.error / c.budget;
  c.pass = c.error <= c.budget;
  return c;
}


// A backend that rounds its 16-bit outputs one way (truncation instead of
// round-to-nearest-even) stays inside the budget, whose absolute floor exceeds
// one ulp below 1. Its errors all point the same way, though. Of the elements
// a quarter ulp or more off the float64 value, round-to-nearest-even sends
// about half towards zero; truncation sends all of them. Errors can also lean
// one way for a reason of the inputs (a constant V shares one rounded P across
// a row), and then the same-precision naive run leans the same way: a bias
// fails only where the naive run does not share it.
struct Lean {
  int64_t off = 0, toward_zero = 0;
  double share(bool towards) const { return off == 0 ? 0.0 : double(towards ? toward_zero : off - toward_zero) / off; }
};

Lean lean_of(const std::vector<double>& x, const std::vector<double>& ref64, int mantissa_bits) {
  Lean l;
  for (size_t i = 0; i < ref64.size() && i < x.size(); ++i) {
    const double v = x[i], r = ref64[i];
    if (!std::isfinite(v) || !std::isfinite(r) || r == 0.0) continue;
    if (std::fabs(v - r) < 0.25 * std::ldexp(1.0, std::ilogb(r) - mantissa_bits)) continue;
    ++l.off;
    l.toward_zero += std::fabs(v) < std::fabs(r);
  }
  return l;
}

std::optional<std::string> rounding_bias(const std::vector<double>& backend, const std::vector<double>& ref64,
                                         const std::vector<double>& naive, Dtype dtype) {
  if (dtype == Dtype::fp32 || backend.size() != ref64.size()) return std::nullopt;
  const int mantissa_bits = dtype == Dtype::bf16 ? 7 : 10;
  const Lean got = lean_of(backend, ref64, mantissa_bits), expected = lean_of(naive, ref64, mantissa_bits);
  const bool towards = got.toward_zero * 2 > got.off;
  if (got.off < 40 || got.share(towards) < 0.95) return std::nullopt;
  if (expected.off >= 40 && expected.share(towards) >= 0.75) return std::nullopt;  // the inputs lean, not the backend
  std::ostringstream os;
  os << "rounding biased " << (towards ? "towards" : "away from") << " zero: "
     << static_cast<int64_t>(got.share(towards) * got.off + 0.5) << " of the " << got.off << " elements a quarter "
     << to_string(dtype) << " ulp or more off the float64 value err the same way, where the naive run's split "
     << expected.off - static_cast<int64_t>(expected.share(towards) * expected.off + 0.5) << " / "
     << static_cast<int64_t>(expected.share(towards) * expected.off + 0.5)
     << " (round-to-nearest-even splits them about evenly)";
  return os.str();
}

}  // namespace

ToleranceCheck check_tolerance(std::string_view tensor, const std::vector<double>& backend,
                               const std::vector<double>& ref64,
                               const std::vector<double>& naive, double k, Dtype dtype, int64_t longest_sum) {
  ToleranceCheck c = compare_within(tensor, backend, ref64, naive_error_of(naive, ref64), k, dtype, 1, longest_sum);
  // Outputs only: a gradient element is a sum over many products of one
  // rounded P, so its errors lean with P's rounding, which a kernel and the
  // naive run may do at different points.
  if (c.pass && tensor == "o")
    if (auto bias = rounding_bias(backend, ref64, naive, dtype)) c.pass = false, c.detail = *bias;
  return c;
}

std::string ToleranceCheck::describe() const {
  std::ostringstream os;
  os.precision(6);
  os << tensor << ": " << (pass ? "pass" : "FAIL");
  if (!detail.empty()) os << " (" << detail << ")";
  if (worst_index >= 0)
    os << ", worst element " << worst_index << ": backend " << backend_value << " vs reference "
       << reference_value;
  os << ", error " << error << (error <= budget ? " <= " : " > ") << "budget " << budget << " = ";
  if (runs > 1) os << runs << " runs x (";
  os << k << " x naive error " << naive_error << " + eps " << eps << (runs > 1 ? ")" : "") << ", ratio " << ratio;
  return os.str();
}

void append_gradient_checks(std::vector<ToleranceCheck>& checks, const std::optional<AttentionGradients>& backend,
                            const std::optional<AttentionGradients>& reference,
                            const std::optional<AttentionGradients>& naive, Dtype dtype, int64_t longest_sum) {
  if (!reference) return;
  const AttentionGradients none;  // a missing result fails on sizes
  const AttentionGradients& b = backend ? *backend : none;
  const AttentionGradients& n = naive ? *naive : none;
  const double k = kGradientToleranceFactor;
  checks.push_back(check_tolerance("dq", b.dq, reference->dq, n.dq, k, dtype, longest_sum));
  checks.push_back(check_tolerance("dk", b.dk, reference->dk, n.dk, k, dtype, longest_sum));
  checks.push_back(check_tolerance("dv", b.dv, reference->dv, n.dv, k, dtype, longest_sum));
}

int64_t longest_naive_sum(const AttentionProblem& problem) {
  const auto layout = validate_shapes(problem.batch);
  if (!layout) return 1;
  const BatchLayout& l = layout.value();
  const int64_t group = problem.shape.heads_kv > 0 ? std::max<int64_t>(1, problem.shape.heads_q / problem.shape.heads_kv) : 1;
  int64_t longest = 1;
  std::map<int64_t, std::pair<int64_t, int64_t>> tokens;  // id -> (q, kv) of one row
  for (int64_t r = 0; r < l.rows(); ++r) {
    tokens.clear();
    const RowView q = side_row(problem.batch.q, l.q_extra, l, r), kv = side_row(problem.batch.kv, l.kv_extra, l, r);
    for (int64_t t = 0; t < q.len; ++t) ++tokens[q.ids[t]].first;
    for (int64_t t = 0; t < kv.len; ++t) ++tokens[kv.ids[t]].second;
    for (const auto& [id, n] : tokens)
      if (id != 0) longest = std::max({longest, n.second, n.first * group});
  }
  return longest;
}

// The naive lse as the backend stores it, and the dtype whose floor judges it.
std::pair<std::vector<double>, Dtype> lse_as_stored(const std::vector<double>& naive_lse, const ProducedOutputs& produced,
                                                    Dtype dtype) {
  if (!produced.lse_in_input_dtype) return {naive_lse, Dtype::fp32};
  std::vector<double> out(naive_lse.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = round_to_dtype(naive_lse[i], dtype);
  return {out, dtype};
}

std::vector<ToleranceCheck> check_attention_tolerance(const AttentionProblem& problem,
                                                      const AttentionInputs& inputs,
                                                      const AttentionResult& backend,
                                                      const AttentionResult& reference,
                                                      const ProducedOutputs& produced) {
  const AttentionResult naive = naive_same_precision(problem, inputs);
  const Dtype dtype = problem.shape.dtype;
  const int64_t terms = longest_naive_sum(problem);
  std::vector<ToleranceCheck> checks;
  checks.push_back(
      check_tolerance("o", backend.o, reference.o, naive.o, kOutputToleranceFactor, dtype, terms));
  if (produced.lse) {
    const auto [naive_lse, lse_dtype] = lse_as_stored(naive.lse, produced, dtype);
    checks.push_back(check_tolerance("lse", backend.lse, reference.lse, naive_lse, kOutputToleranceFactor, lse_dtype, terms));
  }
  if (produced.gradients) append_gradient_checks(checks, backend.grads, reference.grads, naive.grads, dtype, terms);
  return checks;
}

}  // namespace attn_oracle::reference

namespace attn_oracle::inline reference {

std::vector<ToleranceCheck> check_relation_tolerance(const AttentionProblem& problem, const AttentionInputs& inputs,
                                                     const AttentionResult& got, const AttentionResult& expected,
                                                     const ProducedOutputs& produced) {
  const AttentionResult naive = naive_same_precision(problem, inputs);
  const Expected<AttentionResult> truth_or = ref::attention_dense_masked(problem, inputs);
  const AttentionResult truth = truth_or ? truth_or.value() : AttentionResult{};
  const Dtype dtype = problem.shape.dtype;
  const int64_t terms = longest_naive_sum(problem);
  const auto check = [&](const char* name, const std::vector<double>& g, const std::vector<double>& e,
                         const std::vector<double>& n, const std::vector<double>& t, double k, Dtype d) {
    return compare_within(name, g, e, naive_error_of(n, t), k, d, 2, terms);
  };
  std::vector<ToleranceCheck> checks;
  checks.push_back(check("o", got.o, expected.o, naive.o, truth.o, kOutputToleranceFactor, dtype));
  if (produced.lse) {
    const auto [naive_lse, lse_dtype] = lse_as_stored(naive.lse, produced, dtype);
    checks.push_back(check("lse", got.lse, expected.lse, naive_lse, truth.lse, kOutputToleranceFactor, lse_dtype));
  }
  if (!expected.grads || !produced.gradients) return checks;
  const AttentionGradients none;
  const AttentionGradients& g = got.grads ? *got.grads : none;
  const AttentionGradients& n = naive.grads ? *naive.grads : none;
  const AttentionGradients& t = truth.grads ? *truth.grads : none;
  const double k = kGradientToleranceFactor;
  checks.push_back(check("dq", g.dq, expected.grads->dq, n.dq, t.dq, k, dtype));
  checks.push_back(check("dk", g.dk, expected.grads->dk, n.dk, t.dk, k, dtype));
  checks.push_back(check("dv", g.dv, expected.grads->dv, n.dv, t.dv, k, dtype));
  return checks;
}

}  // namespace attn_oracle::reference
