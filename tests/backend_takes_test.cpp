// backend_takes_test.cpp: the case path (eval, replay, repro) asks whether a
// backend takes a case exactly as the properties do (seam/backend_takes.hpp):
//  - a backend that is right only inside its declared domain (no padding,
//    causal or no mask; transformers' packed path) and wrong outside it: the
//    worked example ex2 (padding_causal, padding between documents) replays as
//    SKIP naming the domain field, evaluates as `unsupported`, and repro says
//    declined; before, replay said FAIL while every property declined it;
//  - an invalid input outside the domain's shape fields is declined too (the
//    backend's hook may assume a valid input, the domain may not);
//  - a case inside the domain is judged (and passes).
#include <gtest/gtest.h>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/runner/replay.hpp"
#include "attn_oracle/runner/repro.hpp"
#include "attn_oracle/seam/backend_takes.hpp"

namespace attn_oracle {
namespace {

InputDomain packed_domain() {
  InputDomain d;
  d.self_attention_only = true;
  d.no_padding = true;
  d.mask_kinds = {MaskKind::causal, MaskKind::no_mask};
  return d;
}

// The reference inside packed_domain(); outside it, metadata with one document
// too many and attention that accepts anything (answers zeros).
class RightOnlyInsideItsDomain final : public Backend, public MetadataCapability, public AttentionCapability {
 public:
  std::string name() const override { return "inside-only"; }
  InputDomain domain() const override { return packed_domain(); }
  MetadataCapability* metadata() override { return this; }
  AttentionCapability* attention() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    Expected<Metadata> md = ref::metadata(batch);
    if (!outside_domain(packed_domain(), batch) || !md) return md;
    Metadata wrong = md.value();
    wrong.cu_seqlens_q.push_back(wrong.cu_seqlens_q.back() + 1);
    return wrong;
  }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    if (!outside_domain(packed_domain(), p)) return ref::attention_dense_masked(p, in);
    return AttentionResult{};
  }
};

Case design_fixture(const std::string& name) {
  return read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/design/" + name + ".case.json").value();
}

Case attention_case(const std::string& mask, const std::string& q_ids) {
  const auto j = nlohmann::json::parse(
      R"({"schema": "attn-oracle.case/2", "op": "attention", "mask": ")" + mask +
      R"(", "window": [-1, -1], "max_segments": 2, "heads_q": 1, "heads_kv": 1, "head_dim": 2, "dtype": "fp32",
          "backward": false, "q": {"segment_ids": )" + q_ids + R"(, "segment_pos": [[0, 1, 0]]},
          "kv": {"segment_ids": )" + q_ids + R"(, "segment_pos": [[0, 1, 0]]}, "data": {"seed": 0}})");
  return case_from_json(j).value();
}

std::string lines_of(const Judgement& j) {
  std::string out;
  for (const std::string& line : j.lines) out += "\n  " + line;
  return out;
}

TEST(BackendTakes, ACaseOutsideTheDomainReplaysAsDeclinedNamingTheField) {
  RightOnlyInsideItsDomain backend;
  const Case ex2 = design_fixture("ex2");
  const Judgement j = replay_case(backend, ex2);
  EXPECT_EQ(j.status, Judgement::Status::skip) << lines_of(j);
  ASSERT_FALSE(j.lines.empty());
  EXPECT_NE(j.lines.front().find("declines this case: outside the backend's domain: mask padding_causal"),
            std::string::npos) << j.lines.front();
  EXPECT_NE(j.lines.front().find("(domain field mask_kinds)"), std::string::npos) << j.lines.front();

  const Evaluation e = evaluate_case(backend, ex2);
  EXPECT_EQ(e.kind, Evaluation::Kind::declined);
  EXPECT_EQ(e.output["error"]["code"], "unsupported");

  const auto found = find_disagreement(backend, ex2);
  ASSERT_TRUE(std::holds_alternative<NoDisagreement>(found));
  EXPECT_TRUE(std::get<NoDisagreement>(found).declined) << std::get<NoDisagreement>(found).why;
}

TEST(BackendTakes, TheCasePathAndThePropertiesGiveOneAnswer) {
  RightOnlyInsideItsDomain backend;
  const Case ex2 = design_fixture("ex2");
  const auto answer = metadata_declines(backend, ex2.as<MetadataCase>()->batch);
  ASSERT_TRUE(answer);
  EXPECT_NE(lines_of(judge_case(backend, ex2)).find(*answer), std::string::npos);
}

TEST(BackendTakes, AnInvalidInputOutsideTheDomainsShapeFieldsIsDeclined) {
  RightOnlyInsideItsDomain backend;
  // ids out of order (2 before 1) under a padding mask the domain does not take.
  const Case invalid = attention_case("padding", "[[2, 2, 1]]");
  const Judgement j = judge_case(backend, invalid);
  EXPECT_EQ(j.status, Judgement::Status::skip) << lines_of(j);
  EXPECT_NE(lines_of(j).find("(domain field mask_kinds)"), std::string::npos) << lines_of(j);
}

TEST(BackendTakes, ACaseInsideTheDomainIsJudged) {
  RightOnlyInsideItsDomain backend;
  const Judgement j = judge_case(backend, attention_case("causal", "[[1, 1, 2]]"));
  EXPECT_EQ(j.status, Judgement::Status::pass) << lines_of(j);
}

}  // namespace
}  // namespace attn_oracle
