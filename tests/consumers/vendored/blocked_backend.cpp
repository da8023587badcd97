// blocked_backend.cpp: a metadata backend of the consuming project. It takes
// per-document lengths and offsets from the float64 reference (standing in for
// the project's own segment scan) and builds the flat cumulative arrays itself,
// which is where packed-attention glue code usually goes wrong.
#include <attn_oracle/seam/backend.hpp>
#include <attn_oracle/reference/metadata.hpp>

namespace {

using attn_oracle::Expected;
using attn_oracle::Metadata;

// cu_seqlens: 0, then the running sum of every non-empty document, row-major.
std::vector<int64_t> cumulative(const std::vector<int64_t>& seqlens) {
  std::vector<int64_t> cu{0};
  for (int64_t n : seqlens)
    if (n > 0) cu.push_back(cu.back() + n);
  return cu;
}

class BlockedBackend final : public attn_oracle::Backend, attn_oracle::MetadataCapability {
 public:
  std::string name() const override { return "blocked"; }
  attn_oracle::MetadataCapability* metadata() override { return this; }

  Expected<Metadata> metadata(const attn_oracle::PackedBatch& batch) override {
    auto md = attn_oracle::ref::metadata(batch);
    if (!md) return md;
    Metadata out = md.value();
    out.cu_seqlens_q = cumulative(out.q_seqlens);
    out.cu_seqlens_kv = cumulative(out.kv_seqlens);
    return out;
  }
};

}  // namespace

ATTN_ORACLE_REGISTER_BACKEND(BlockedBackend);
