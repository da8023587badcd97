// tolerance.hpp: the float tolerance rule of docs/semantics.md#6-tolerance (FlashAttention's).
//
// A low-precision backend is judged against the float64 reference *relative to
// what its precision can achieve*: the oracle also runs a same-precision naive
// computation (inputs already rounded to the dtype, fp32 accumulation, P and the
// outputs rounded to the dtype) and the backend passes a tensor when
//
//     max |backend - ref64| <= k * max |naive - ref64| + eps(dtype)
//
// with k = 2 for outputs (o, lse) and 3 for gradients (dq, dk, dv). Infinities
// (lse = -inf for queries that attend nothing) must match exactly and any NaN in
// the backend or the reference fails. A check reports its worst element (flat
// index, both values, error / budget), never just "mismatch".
//
// Tested by tests/tolerance_test.cpp: a known-good pair (the reference rounded
// to bf16) passes, a known-bad one (one element off by 0.1) fails at that index,
// -inf handling, NaN, and the naive computation against the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn_oracle/model/attention.hpp"

namespace attn_oracle::inline reference {

inline constexpr double kOutputToleranceFactor = 2.0;    // k for o and lse
inline constexpr double kGradientToleranceFactor = 3.0;  // k for dq, dk, dv
// The naive run must agree with the float64 oracle within this many units of
// roundoff of its precision, times max(1, |oracle|), or the check fails with
// "oracle suspect" (the oracle cannot widen its own budget). Its fp32 sums of
// n > kOracleAgreementTerms terms (a key's dk over thousands of queries) drift
// further, like a random walk: the bound is then sqrt(n / kOracleAgreementTerms)
// times as wide. An oracle bug is off by O(1) whatever the length.
inline constexpr double kOracleAgreementUnits = 64.0;
inline constexpr double kOracleAgreementTerms = 64.0;

// The absolute floor eps of the rule for tensors stored in `dtype` (see tolerance.cpp).
double tolerance_floor(Dtype dtype);

// What a straightforward device implementation computes in problem.shape.dtype:
// fp32 dot products for S, fp32 softmax, P rounded to the dtype before P.V with
// fp32 accumulation, O rounded to the dtype; lse in fp32; backward in fp32 from
// the rounded O, with dq, dk, dv rounded to the dtype. Same mask as the dense
// reference (explicit mask with the window). An invalid problem gives an empty
// result (every check against it then fails on sizes).
AttentionResult naive_same_precision(const AttentionProblem& problem,
                                     const AttentionInputs& inputs);

struct ToleranceCheck {
  bool pass = false;
  std::string tensor;            // "o", "lse", "dq", "dk", "dv"
  int64_t worst_index = -1;      // flat index of the worst element; -1 when there is none
  double backend_value = 0.0;    // at worst_index
  double reference_value = 0.0;  // at worst_index
  double error = 0.0;            // max |backend - ref64| (infinite for a NaN / inf mismatch)
  double budget = 0.0;           // k * naive_error + eps
  double ratio = 0.0;            // error / budget
  double naive_error = 0.0;      // max |naive - ref64| over finite differences
  double k = 0.0, eps = 0.0;     // the factor and the dtype's floor that made the budget
  int runs = 1;                  // 2 for a relation between two runs of one backend
  std::string detail;            // non-empty for structural failures: sizes, NaN, infinities
  std::string describe() const;  // one line: verdict, worst element, budget
};

// The rule for one tensor. `naive` is the same-precision naive result; its
// non-finite differences from ref64 are ignored (they measure nothing).
// `longest_sum`: the most terms the naive run adds up for one element
// (longest_naive_sum), which widens the oracle-suspect bound past kOracleAgreementTerms.
ToleranceCheck check_tolerance(std::string_view tensor, const std::vector<double>& backend,
                               const std::vector<double>& ref64,
                               const std::vector<double>& naive, double k, Dtype dtype, int64_t longest_sum = 1);

// The most terms one element of the naive run sums: a query's keys (o, dq) or
// a key's queries over the heads that share it (dk, dv), bounded by the
// longest document side (times the GQA group for the queries).
int64_t longest_naive_sum(const AttentionProblem& problem);


// Runs naive_same_precision itself and checks o and lse (k = 2; lse is fp32 on
// every device, so its floor is fp32's), then dq, dk, dv (k = 3) when the
// reference has gradients. `inputs` are the dtype-rounded inputs both results saw.
// Appends the dq, dk, dv checks (k = 3) when the reference has gradients; a
// backend without them fails on sizes.
void append_gradient_checks(std::vector<ToleranceCheck>& checks, const std::optional<AttentionGradients>& backend,
                            const std::optional<AttentionGradients>& reference,
                            const std::optional<AttentionGradients>& naive, Dtype dtype, int64_t longest_sum = 1);

// `produced`: what the backend produces (attention.hpp); an output it does not
// produce is not checked.
std::vector<ToleranceCheck> check_attention_tolerance(const AttentionProblem& problem,
                                                      const AttentionInputs& inputs,
                                                      const AttentionResult& backend,
                                                      const AttentionResult& reference,
                                                      const ProducedOutputs& produced = {});

// A backend against itself: `got` on `problem`, `expected` the same backend on a
// transformed problem with its outputs moved into `problem`'s layout (a document
// permutation, repeated kv heads, an equivalent mask). Each run may be off the
// float64 truth by its own budget, so they may differ by twice the budget the
// truth (ref::attention_dense_masked of `problem`) gives: the budget is measured
// against the oracle, never against the backend's own output, so a wrong backend
// cannot widen it. `problem` must be one the backend computes the token-level
// mask of (representable, for kernels:
// docs/semantics.md#the-kernels-index-rule-and-representability).
std::vector<ToleranceCheck> check_relation_tolerance(const AttentionProblem& problem,
                                                     const AttentionInputs& inputs, const AttentionResult& got,
                                                     const AttentionResult& expected,
                                                     const ProducedOutputs& produced = {});

}  // namespace attn_oracle::reference
