// optional_fields_test.cpp: through the C++ seam, the optional metadata fields
// (max_seqlen_q/kv, indices_q/kv: Metadata's std::optional members) are judged
// exactly when a backend sets them, and lse stored in the input dtype is judged
// at that precision when the backend says so (ProducedOutputs::lse_in_input_dtype).
// Each with a twin that gets it wrong and must fail naming the field.
// python/tests/test_optional_fields.py does the same through a worker.
#include <gtest/gtest.h>

#include <functional>

#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle {
namespace {

// The reference with its metadata's optional fields set, then edited by `edit`.
class WithOptionalMetadata final : public Backend, MetadataCapability {
 public:
  explicit WithOptionalMetadata(std::function<void(Metadata&)> edit = {}) : edit_(std::move(edit)) {}
  std::string name() const override { return "reference-with-optional-metadata"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    Expected<Metadata> md = inner_->metadata()->metadata(batch);
    if (!md) return md;
    Metadata out = derived_metadata(md.value());
    if (edit_) edit_(out);
    return out;
  }

 private:
  std::function<void(Metadata&)> edit_;
  std::unique_ptr<Backend> inner_ = make_reference_backend();
};

// The reference with lse rounded to the problem's dtype, declared or not.
class LseInInputDtype final : public Backend, AttentionCapability {
 public:
  explicit LseInInputDtype(bool declared) : declared_(declared) {}
  std::string name() const override { return declared_ ? "lse-in-input-dtype" : "lse-in-input-dtype-undeclared"; }
  ProducedOutputs outputs() const override { return ProducedOutputs{.lse_in_input_dtype = declared_}; }
  AttentionCapability* attention() override { return this; }
  bool token_level_mask() const override { return true; }
  std::optional<std::string> unsupported(const AttentionProblem& p) override {
    return inner_->attention()->unsupported(p);
  }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    Expected<AttentionResult> r = inner_->attention()->attention(p, in);
    if (r)
      for (double& x : r.value().lse) x = round_to_dtype(x, p.shape.dtype);
    return r;
  }

 private:
  bool declared_;
  std::unique_ptr<Backend> inner_ = make_reference_backend();
};

PropertyOutcome run(const char* property, Backend& backend) {
  RunSettings settings = default_run_settings();
  settings.cases = 60;
  return run_property(*find_property(property), backend, settings);
}

std::string first_message(const PropertyOutcome& o) { return o.failures.empty() ? "" : o.failures.front().message; }

TEST(OptionalMetadataFields, RightOnesPass) {
  WithOptionalMetadata backend;
  const PropertyOutcome o = run("metadata/matchesReference", backend);
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << first_message(o);
}

TEST(OptionalMetadataFields, AWrongMaxSeqlenFailsNamingIt) {
  WithOptionalMetadata backend([](Metadata& md) { ++*md.max_seqlen_kv; });
  const PropertyOutcome o = run("metadata/matchesReference", backend);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_NE(first_message(o).find("max_seqlen_kv: backend"), std::string::npos) << first_message(o);
}

TEST(OptionalMetadataFields, UnpadIndicesMissingTheLastTokenFailNamingThem) {
  WithOptionalMetadata backend([](Metadata& md) {
    if (!md.indices_q->empty()) md.indices_q->pop_back();
  });
  const PropertyOutcome o = run("metadata/matchesReference", backend);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_NE(first_message(o).find("indices_q["), std::string::npos) << first_message(o);
}

TEST(LseInInputDtype, PassesWhenDeclared) {
  LseInInputDtype backend(true);
  const PropertyOutcome o = run("attention/matchesReference", backend);
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << first_message(o);
}

TEST(LseInInputDtype, FailsAtFp32PrecisionWhenNotDeclared) {
  LseInInputDtype backend(false);
  const PropertyOutcome o = run("attention/matchesReference", backend);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_NE(first_message(o).find("lse"), std::string::npos) << first_message(o);
}

}  // namespace
}  // namespace attn_oracle
