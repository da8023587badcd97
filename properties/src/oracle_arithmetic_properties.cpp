// oracle_arithmetic_properties.cpp: the float64 oracle's own arithmetic, checked
// on every run. Both references (dense and per-document) run the same tile
// arithmetic (reference/src/attention_tiles.hpp: scores, masked softmax, lse,
// P V, dP, dS, the gradient products) and differ only in the mask they fill a
// tile with, so they agree bitwise and a mistake in that arithmetic would
// agree with itself. attention/oracleArithmeticMatchesScalarLoops compares each
// with the scalar loops it replaced (reference/scalar/: the dense one over a
// whole row's explicit mask, the per-document one with three dot products per
// attended pair and P recomputed from lse in backward), forward and backward,
// to 1e-12 relative to each tensor (normwise: of max(1, its largest |value|),
// as tests/reference_tiles_test.cpp does at 1e-14: a gradient that is 0 in
// exact arithmetic is rounding noise of the terms that cancel), on small problems. Registered with the attention capability so
// that every backend's run checks its judge; the backend is never called.
// tests/oracle_arithmetic_test.cpp plants faults in the shared tile arithmetic
// (tests/planted/tile_faults.hpp, installed through reference_calls.hpp) and sees each
// caught and shrunk to a few tokens.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "scalar_attention.hpp"

namespace attn_oracle::inline properties {
namespace {

constexpr double kRelative = 1e-12;

// Small problems inside the backend's domain: short rows, so that the scalar
// loops cost little and a failure starts near its shrunk size.
Case draw_small(const DrawContext& context) {
  AttentionOptions options;
  options.batch.max_len = 12;
  options.batch.max_docs = 3;
  options.batch.kernel_tile_weight = 0;
  options.batch.domain = context.domain;
  options.batch.profile = context.profile;
  const AttentionDraw d = *attention_draw(options);
  return Case{AttentionCase{d.problem, d.seed, std::nullopt}, {}, {}, {}};
}

// "dq[5] (row 0, token 1, head 0, d 1)" for a [R, T, H, D] tensor, "lse[3] (row 0, head 1, token 0)" for lse.
std::string element(const char* name, size_t i, const AttentionSizes& z, int64_t tokens, int64_t heads) {
  std::ostringstream os;
  os << name << "[" << i << "] (";
  if (std::string(name) == "lse")
    os << "row " << i / (heads * tokens) << ", head " << i / tokens % heads << ", token " << i % tokens << ")";
  else
    os << "row " << i / (tokens * heads * z.head_dim) << ", token " << i / (heads * z.head_dim) % tokens << ", head "
       << i / z.head_dim % heads << ", d " << i % z.head_dim << ")";
  return os.str();
}

// The first element of `got` off `want` by more than kRelative of max(1, the
// tensor's largest magnitude) (-inf must be -inf), or "".
std::string first_difference(const char* name, const std::vector<double>& got, const std::vector<double>& want,
                             const AttentionSizes& z, int64_t tokens, int64_t heads) {
  if (got.size() != want.size())
    return std::string(name) + " has " + std::to_string(got.size()) + " elements, the scalar loops " + std::to_string(want.size());
  double largest = 0;
  for (double w : want)
    if (std::isfinite(w)) largest = std::max(largest, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    const bool same = std::isfinite(b) ? std::abs(a - b) <= kRelative * std::max(1.0, largest) : a == b;
    if (same) continue;
    std::ostringstream os;
    os.precision(17);
    os << element(name, i, z, tokens, heads) << ": oracle " << a << ", scalar loops " << b;
    return os.str();
  }
  return "";
}

void require_same(const char* which, const AttentionResult& got, const AttentionResult& want, const AttentionSizes& z) {
  std::string diff = first_difference("o", got.o, want.o, z, z.q_len, z.heads_q);
  if (diff.empty()) diff = first_difference("lse", got.lse, want.lse, z, z.q_len, z.heads_q);
  if (diff.empty() && got.grads.has_value() != want.grads.has_value()) diff = "gradients present in one result only";
  if (diff.empty() && got.grads) {
    diff = first_difference("dq", got.grads->dq, want.grads->dq, z, z.q_len, z.heads_q);
    if (diff.empty()) diff = first_difference("dk", got.grads->dk, want.grads->dk, z, z.kv_len, z.heads_kv);
    if (diff.empty()) diff = first_difference("dv", got.grads->dv, want.grads->dv, z, z.kv_len, z.heads_kv);
  }
  if (!diff.empty()) fail_case(std::string(which) + " reference vs its scalar loops: " + diff);
}

void oracle_arithmetic_matches_scalar_loops(Backend&, const Case& c, CheckRecord& record) {
  const AttentionCase& a = payload_of<AttentionCase>(c);
  const Expected<AttentionInputs> inputs = attention_inputs(a);
  if (!inputs) fail_with("the case has no inputs: ", inputs.error());
  const Expected<AttentionSizes> sizes = validate_attention(a.problem, &inputs.value());
  if (!sizes) decline_case("not a valid problem: " + std::string(to_string(sizes.error().code)));
  record.classify(a.problem.shape.backward, "backward");
  const auto run = [&](const char* which, ReferenceCalls::Attention oracle_fn, ReferenceCalls::Attention scalar_fn) {
    const Expected<AttentionResult> got = oracle_fn(a.problem, inputs.value());
    const Expected<AttentionResult> want = scalar_fn(a.problem, inputs.value());
    if (!want) fail_with(std::string("the scalar ") + which + " loops reject the problem: ", want.error());
    if (!got) fail_with(std::string("the ") + which + " reference rejects a problem its scalar loops take: ", got.error());
    require_same(which, got.value(), want.value(), sizes.value());
  };
  run("dense", reference_calls().dense, ref::scalar::attention_dense_masked);
  const bool representable = ref::representability(a.problem.batch).representable;
  record.classify(representable, "per-document compared");
  if (representable) run("per-document", reference_calls().per_document, ref::scalar::attention_per_document);
}

}  // namespace

std::vector<PropertyDef> oracle_arithmetic_properties() {
  return {{"attention/oracleArithmeticMatchesScalarLoops", Capability::attention,
           "the float64 dense and per-document references equal their scalar loops (forward and backward, to 1e-12 "
           "relative) on small problems: their shared tile arithmetic checked on every run",
           draw_small, oracle_arithmetic_matches_scalar_loops}};
}

}  // namespace attn_oracle::properties
