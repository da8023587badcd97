// kv_buffer_metadata_only_test.cpp: a K/V buffer backend that serves
// micro_sequence alone (KvBufferCapability::steps() says so) is judged by the
// metadata properties and skipped, never failed, on the ones that call a step:
//  - correct metadata passes kv_buffer/metadataIsCanonical,
//    metadataDrivesAttentionLikeTheReference and earlierDocumentsDoNotInfluence
//    (whose attend is then the suite's float64 varlen kernel) and skips the rest
//    with the step named;
//  - cu_seqlens_k counted from first_document_begin (a real stack's bug) fails
//    all three and shrinks to two one-token documents;
//  - first_document_begin 0 with the first document's run widened to row 0
//    fails earlierDocumentsDoNotInfluence through the kernel: the poison is read;
//  - a backend that declares every step but declines them (the default step
//    implementations answer `unsupported`) is skipped on them, not failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "attn_oracle/cases/kv_buffer_case.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "planted/planted_runner.hpp"

namespace attn_oracle {
namespace {

using Plan = std::function<Expected<MicroSequenceMetadata>(const KvBufferProblem&, int64_t)>;

class MetadataOnlyKvBuffer final : public KvBufferCapability {
 public:
  MetadataOnlyKvBuffer(Plan plan, KvBufferSteps steps) : plan_(std::move(plan)), steps_(steps) {}
  Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& p, int64_t i) override { return plan_(p, i); }
  KvBufferSteps steps() const override { return steps_; }

 private:
  Plan plan_;
  KvBufferSteps steps_;
};

class MetadataOnlyBackend final : public Backend {
 public:
  explicit MetadataOnlyBackend(Plan plan, KvBufferSteps steps = {false, false, false}) : kv_(std::move(plan), steps) {}
  std::string name() const override { return "metadata-only"; }
  KvBufferCapability* kv_buffer() override { return &kv_; }

 private:
  MetadataOnlyKvBuffer kv_;
};

const std::vector<std::string> kMetadataProperties = {"kv_buffer/metadataIsCanonical",
                                                      "kv_buffer/metadataDrivesAttentionLikeTheReference",
                                                      "kv_buffer/earlierDocumentsDoNotInfluence"};

bool is_metadata_property(const std::string& id) {
  return std::find(kMetadataProperties.begin(), kMetadataProperties.end(), id) != kMetadataProperties.end();
}

PropertyOutcome run(const std::string& id, Backend& backend) {
  return run_property(*find_property(id), backend, planted::planted_settings());
}

TEST(KvBufferMetadataOnly, CorrectMetadataPassesTheMetadataPropertiesAndSkipsTheRest) {
  MetadataOnlyBackend backend(ref::micro_sequence_metadata);
  for (const PropertyDef& p : kv_buffer_properties()) {
    const PropertyOutcome o = run(p.id, backend);
    if (is_metadata_property(p.id)) {
      EXPECT_EQ(o.status, PropertyOutcome::Status::passed) << p.id << ": " << o.message;
    } else {
      EXPECT_EQ(o.status, PropertyOutcome::Status::skipped) << p.id;
      EXPECT_NE(o.message.find("serves kv_buffer without the step"), std::string::npos) << p.id << ": " << o.message;
    }
  }
}

Expected<MicroSequenceMetadata> cu_seqlens_k_from_first_document_begin(const KvBufferProblem& p, int64_t i) {
  auto md = ref::micro_sequence_metadata(p, i);
  if (md)
    for (int64_t& k : md.value().cu_seqlens_k) k += md->first_document_begin;
  return md;
}

TEST(KvBufferMetadataOnly, CuSeqlensKFromFirstDocumentBeginFailsTheThreeAndShrinksToTwoTokens) {
  MetadataOnlyBackend backend(cu_seqlens_k_from_first_document_begin);
  for (const std::string& id : kMetadataProperties) {
    const PropertyOutcome o = run(id, backend);
    ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << id;
    const KvBufferCase* k = o.failures.at(0).counterexample.as<KvBufferCase>();
    ASSERT_NE(k, nullptr) << id;
    EXPECT_EQ(k->problem.doc_lengths, (std::vector<int64_t>{1, 1})) << id << ": " << o.failures.at(0).message;
    if (id == "kv_buffer/earlierDocumentsDoNotInfluence") {
      EXPECT_NE(o.failures.at(0).message.find("the suite's float64 varlen kernel"), std::string::npos)
          << o.failures.at(0).message;
    }
  }
}

// The first document's run widened back to row 0: the kernel reads the earlier documents.
Expected<MicroSequenceMetadata> view_from_row_zero(const KvBufferProblem& p, int64_t i) {
  auto md = ref::micro_sequence_metadata(p, i);
  if (!md) return md;
  MicroSequenceMetadata& m = md.value();
  for (size_t s = 1; s < m.cu_seqlens_k.size(); ++s) m.cu_seqlens_k[s] += m.first_document_begin;
  m.first_document_begin = 0;
  return md;
}

TEST(KvBufferMetadataOnly, ViewFromRowZeroLetsEarlierDocumentsInThroughTheKernel) {
  MetadataOnlyBackend backend(view_from_row_zero);
  const PropertyOutcome o = run("kv_buffer/earlierDocumentsDoNotInfluence", backend);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_NE(o.failures.at(0).message.find("nan"), std::string::npos) << o.failures.at(0).message;
}

TEST(KvBufferMetadataOnly, DeclinedStepsAreSkippedNotFailed) {
  MetadataOnlyBackend backend(ref::micro_sequence_metadata, KvBufferSteps{});  // claims every step, serves none
  for (const PropertyDef& p : kv_buffer_properties()) {
    const PropertyOutcome o = run(p.id, backend);
    EXPECT_NE(o.status, PropertyOutcome::Status::failed) << p.id << ": " << o.failures.at(0).message;
    // The draws of the others that call no step pass: one without a prefix, a
    // command sequence of no-ops (Attend before its slice is written).
    if (p.id != "kv_buffer/streamingMatchesWholeSequence" && p.id != "kv_buffer/inactivePrefixReceivesExactlyZero") continue;
    EXPECT_EQ(o.status, PropertyOutcome::Status::skipped) << p.id << ": " << o.message;
    EXPECT_NE(o.message.find("does not serve the kv_buffer step"), std::string::npos) << p.id << ": " << o.message;
  }
}

}  // namespace
}  // namespace attn_oracle
