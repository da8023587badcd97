// planted_backends.cpp: the wrapper backends every planted bug is built on.
#include "planted/planted_backends.hpp"

#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::planted {

Expected<AttentionResult> with_reference_gradients(AttentionResult forward, const AttentionProblem& problem,
                                                   const AttentionInputs& in) {
  if (!problem.shape.backward) return forward;
  auto reference = ref::attention_dense_masked(problem, in);
  if (!reference) return reference.error();
  forward.grads = std::move(reference->grads);
  return forward;
}
namespace {

class MetadataOnly final : public Backend, MetadataCapability {
 public:
  MetadataOnly(std::string name, std::function<Expected<Metadata>(const PackedBatch&)> f)
      : name_(std::move(name)), f_(std::move(f)) {}
  std::string name() const override { return name_; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return f_(batch); }

 private:
  std::string name_;
  std::function<Expected<Metadata>(const PackedBatch&)> f_;
};

class AttentionOnly final : public Backend, AttentionCapability {
 public:
  using Fn = std::function<Expected<AttentionResult>(const AttentionProblem&, const AttentionInputs&)>;
  AttentionOnly(std::string name, Fn f) : name_(std::move(name)), f_(std::move(f)) {}
  std::string name() const override { return name_; }
  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return f_(p, in);
  }

 private:
  std::string name_;
  Fn f_;
};

class SmallSeqWithReferenceAttention final : public Backend, SmallSeqCapability, AttentionCapability {
 public:
  using Fn = std::function<Expected<SmallSeqResult>(const AttentionProblem&, const AttentionInputs&)>;
  SmallSeqWithReferenceAttention(std::string name, Fn f) : name_(std::move(name)), f_(std::move(f)) {}
  std::string name() const override { return name_; }
  SmallSeqCapability* small_seq() override { return this; }
  Expected<SmallSeqResult> small_seq(const AttentionProblem& p, const AttentionInputs& in) override { return f_(p, in); }
  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return ref::attention_dense_masked(p, in);
  }

 private:
  std::string name_;
  Fn f_;
};

}  // namespace

std::unique_ptr<Backend> small_seq_backend(
    std::string name,
    std::function<Expected<SmallSeqResult>(const AttentionProblem&, const AttentionInputs&)> f) {
  return std::make_unique<SmallSeqWithReferenceAttention>(std::move(name), std::move(f));
}

std::unique_ptr<Backend> metadata_backend(std::string name,
                                          std::function<Expected<Metadata>(const PackedBatch&)> f) {
  return std::make_unique<MetadataOnly>(std::move(name), std::move(f));
}

std::unique_ptr<Backend> attention_backend(
    std::string name,
    std::function<Expected<AttentionResult>(const AttentionProblem&, const AttentionInputs&)> f) {
  return std::make_unique<AttentionOnly>(std::move(name), std::move(f));
}

}  // namespace attn_oracle::planted
