// optional_outputs_test.cpp: a backend that declares it produces no lse, no
// gradients or no small-seq P (Backend::outputs) is judged on what it produces.
// The outputs it does not produce are returned as NaN here, so a property that
// read them would fail. Every attention property passes on the reference behind
// such a declaration, and the summary and the report say what was not compared.
// A property that needs a missing output is skipped with the reason. Without
// lse, o is still judged: a planted bug (top-left causal where bottom-right was
// asked, as an SDPA-based backend without lse gets it wrong) still fails.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/runner/replay.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;

void poison(std::vector<double>& v) { std::fill(v.begin(), v.end(), std::nan("")); }

// The reference behind a declaration of what it produces; what it does not
// produce comes back as NaN. Counts the backward problems it is given.
class Declaring final : public Backend, AttentionCapability, SmallSeqCapability {
 public:
  Declaring(std::string name, ProducedOutputs produced, bool top_left_causal = false)
      : name_(std::move(name)), produced_(produced), top_left_causal_(top_left_causal) {}
  std::string name() const override { return name_; }
  ProducedOutputs outputs() const override { return produced_; }
  AttentionCapability* attention() override { return this; }
  SmallSeqCapability* small_seq() override { return this; }
  bool token_level_mask() const override { return true; }

  std::optional<std::string> unsupported(const AttentionProblem& p) override {
    return inner_->attention()->unsupported(p);
  }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    backward_calls += p.shape.backward;
    AttentionProblem asked = p;
    if (top_left_causal_ && is_bottom_right(p.batch.mask))
      asked.batch.mask = allows_padding(p.batch.mask) ? MaskKind::padding_causal : MaskKind::causal;
    Expected<AttentionResult> r = inner_->attention()->attention(asked, in);
    if (!r) return r;
    if (!produced_.lse) poison(r.value().lse);
    if (!produced_.gradients && r.value().grads) poison(r.value().grads->dq);
    return r;
  }
  Expected<SmallSeqResult> small_seq(const AttentionProblem& p, const AttentionInputs& in) override {
    backward_calls += p.shape.backward;
    Expected<SmallSeqResult> r = inner_->small_seq()->small_seq(p, in);
    if (r && !produced_.small_seq_p) poison(r.value().p);
    return r;
  }

  int backward_calls = 0;

 private:
  std::string name_;
  ProducedOutputs produced_;
  bool top_left_causal_;
  std::unique_ptr<Backend> inner_ = make_reference_backend();
};

std::vector<PropertyOutcome> run_all(Backend& backend, Capability capability) {
  std::vector<PropertyOutcome> out;
  RunSettings settings = default_run_settings();
  settings.cases = 20;  // every attention property: 20 draws each is seconds in release, a minute under the sanitizers
  for (const PropertyDef& property : all_properties())
    if (property.needs == capability) out.push_back(run_property(property, backend, settings));
  return out;
}

TEST(OptionalOutputs, ABackendWithoutLsePassesEveryAttentionPropertyAndSaysLseWasNotCompared) {
  Declaring backend("no-lse", ProducedOutputs{.lse = false});
  for (const PropertyOutcome& o : run_all(backend, Capability::attention)) {
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << o.property << ": " << o.message;
    EXPECT_EQ(o.not_compared, std::vector<std::string>{"lse"}) << o.property;
    EXPECT_EQ(not_compared_line(o), "lse not compared (the backend does not produce it)");
  }
  EXPECT_GT(backend.backward_calls, 0) << "gradients are still judged";
}

TEST(OptionalOutputs, ABackendWithoutGradientsIsGivenForwardProblemsOnly) {
  Declaring backend("no-gradients", ProducedOutputs{.gradients = false});
  for (const PropertyOutcome& o : run_all(backend, Capability::attention)) {
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << o.property << ": " << o.message;
    EXPECT_EQ(o.not_compared, std::vector<std::string>{"gradients"}) << o.property;
  }
  EXPECT_EQ(backend.backward_calls, 0);
}

TEST(OptionalOutputs, APropertyThatNeedsAMissingOutputIsSkippedWithTheReason) {
  Declaring backend("no-p", ProducedOutputs{.small_seq_p = false});
  for (const PropertyOutcome& o : run_all(backend, Capability::small_seq)) {
    if (o.property == "small_seq/probabilityRowsSumToOneAndZeroPastKeys") {
      EXPECT_EQ(o.status, PropertyOutcome::Status::skipped);
      EXPECT_EQ(o.message, "backend no-p does not produce small-seq P");
      continue;
    }
    EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << o.property << ": " << o.message;
    EXPECT_EQ(o.not_compared, std::vector<std::string>{"small-seq P"}) << o.property;
  }
}

TEST(OptionalOutputs, WithoutLseTheOutputIsStillJudged) {
  Declaring backend("no-lse-top-left", ProducedOutputs{.lse = false}, /*top_left_causal=*/true);
  const PropertyDef* matches = nullptr;
  for (const PropertyDef& p : all_properties())
    if (p.id == "attention/matchesReference") matches = &p;
  ASSERT_NE(matches, nullptr);
  const PropertyOutcome o = run_property(*matches, backend, default_run_settings());
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  ASSERT_FALSE(o.failures.empty());
  EXPECT_EQ(o.failures[0].message.rfind("o: FAIL", 0), 0u) << o.failures[0].message;
  EXPECT_EQ(o.failures[0].message.find("lse"), std::string::npos) << o.failures[0].message;
}

// A fixture judged on a backend (`eval --backend`, a replay without a property
// record) follows the same declaration: a backward fixture passes without lse,
// and is skipped, with the reason, on a backend without gradients.
TEST(OptionalOutputs, AFixtureIsJudgedOnWhatTheBackendProduces) {
  const Expected<Case> c = read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/regressions/window_right_int64_max.case.json");
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(std::get<AttentionCase>(c->payload).problem.shape.backward);
  Declaring no_lse("no-lse", ProducedOutputs{.lse = false}), no_gradients("no-gradients", ProducedOutputs{.gradients = false});
  const Judgement without_lse = judge_case(no_lse, c.value());
  EXPECT_EQ(without_lse.status, Judgement::Status::pass) << testing::PrintToString(without_lse.lines);
  const Judgement without_gradients = judge_case(no_gradients, c.value());
  EXPECT_EQ(without_gradients.status, Judgement::Status::skip) << testing::PrintToString(without_gradients.lines);
  EXPECT_EQ(no_gradients.backward_calls, 0);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(OptionalOutputs, TheReportAndTheSummarySayLseNotCompared) {
  BackendRegistry::instance().add("no-lse", [] { return std::make_unique<Declaring>("no-lse", ProducedOutputs{.lse = false}); });
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_optional_outputs_test";
  CheckOptions options;
  options.backend = "no-lse";
  options.filter = "attention/matchesReference";
  options.cases = 10;
  options.isolate = false;
  options.report_dir = dir.string();
  testing::internal::CaptureStdout();
  EXPECT_EQ(run_check_command(options, CheckEnvironment{}), 0);
  const std::string summary = testing::internal::GetCapturedStdout();
  EXPECT_NE(summary.find("note: lse not compared (the backend does not produce it)"), std::string::npos) << summary;
  EXPECT_NE(slurp(dir / "conformance.md").find("lse not compared"), std::string::npos);
  const nlohmann::json report = nlohmann::json::parse(slurp(dir / "conformance.json"));
  EXPECT_EQ(report["results"][0]["not_compared"], nlohmann::json::array({"lse"}));
}

}  // namespace
}  // namespace attn_oracle
