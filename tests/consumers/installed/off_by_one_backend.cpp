// off_by_one_backend.cpp: a metadata backend whose cumulative KV lengths run one
// past the end of the last document whenever a batch holds two or more of them,
// the kind of slip a hand-written prefix sum makes. The suite must catch it.
#include <attn_oracle/backend.hpp>
#include <attn_oracle/reference/metadata.hpp>

namespace {

class OffByOneBackend final : public attn_oracle::Backend, attn_oracle::MetadataCapability {
 public:
  std::string name() const override { return "off_by_one"; }
  attn_oracle::MetadataCapability* metadata() override { return this; }

  attn_oracle::Expected<attn_oracle::Metadata> metadata(const attn_oracle::PackedBatch& batch) override {
    auto md = attn_oracle::ref::metadata(batch);
    if (md && md.value().cu_seqlens_kv.size() > 2) {
      attn_oracle::Metadata bad = md.value();
      bad.cu_seqlens_kv.back() += 1;
      return bad;
    }
    return md;
  }
};

}  // namespace

ATTN_ORACLE_REGISTER_BACKEND(OffByOneBackend);
