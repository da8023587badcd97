// restricted_backend_test.cpp: a backend that supports what the CUDA kernels do
// (head_dim 64/128/256, fp16/bf16 only) still gets every attention property run
// on most draws: draws are moved to the nearest supported problem, so none is
// declined as unsupported (only inputs the kernels cannot represent are). The
// backend is the reference behind that restriction, so every property must pass.
#include <gtest/gtest.h>

#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle {
namespace {

class KernelShapedReference final : public Backend, AttentionCapability {
 public:
  std::string name() const override { return "kernel-shaped-reference"; }
  AttentionCapability* attention() override { return this; }
  std::optional<std::string> unsupported(const AttentionProblem& p) override {
    const int64_t d = p.shape.head_dim;
    if (d != 64 && d != 128 && d != 256) return "head_dim " + std::to_string(d);
    if (p.shape.dtype == Dtype::fp32) return std::string("fp32");
    return std::nullopt;
  }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return ref::attention_dense_masked(p, in);
  }
};

TEST(RestrictedBackend, RunsEveryAttentionPropertyWithoutGivingUp) {
  KernelShapedReference backend;
  const RunSettings settings = default_run_settings();
  for (const PropertyDef& property : all_properties()) {
    if (property.needs != Capability::attention) continue;
    const PropertyOutcome o = run_property(property, backend, settings);
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << property.id << ": " << o.message;
    for (const auto& [reason, n] : o.decline_reasons)
      EXPECT_NE(reason.rfind("unsupported", 0), 0u) << property.id << ": " << n << " draws declined: " << reason;
    EXPECT_GE(o.passed, settings.cases / 2) << property.id;
  }
}

}  // namespace
}  // namespace attn_oracle
