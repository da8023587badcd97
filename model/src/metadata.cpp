#include "attn_oracle/model/metadata.hpp"

#include <algorithm>

namespace attn_oracle::inline model {
namespace {

int64_t longest(const std::vector<int64_t>& cu) {
  int64_t out = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) out = std::max(out, cu[s + 1] - cu[s]);
  return out;
}

std::vector<int64_t> token_indices(const std::vector<int64_t>& cu, const std::vector<int64_t>& ragged) {
  std::vector<int64_t> out;
  out.reserve(cu.empty() ? 0 : size_t(cu.back()));
  for (size_t s = 0; s + 1 < cu.size() && s < ragged.size(); ++s)
    for (int64_t t = 0; t < cu[s + 1] - cu[s]; ++t) out.push_back(ragged[s] + t);
  return out;
}

}  // namespace

Metadata derived_metadata(Metadata md) {
  md.max_seqlen_q = longest(md.cu_seqlens_q), md.max_seqlen_kv = longest(md.cu_seqlens_kv);
  md.indices_q = token_indices(md.cu_seqlens_q, md.ragged_offsets_q);
  md.indices_kv = token_indices(md.cu_seqlens_kv, md.ragged_offsets_kv);
  return md;
}

std::vector<OptionalMetadataField> returned_optional_fields(const Metadata& got, const Metadata& want) {
  std::vector<OptionalMetadataField> out;
  // Every metadata comparison asks; most backends return none of them.
  if (!got.max_seqlen_q && !got.max_seqlen_kv && !got.indices_q && !got.indices_kv) return out;
  const Metadata full = derived_metadata(want);
  const auto scalar = [&](const char* name, const std::optional<int64_t>& g, const std::optional<int64_t>& w) {
    if (g) out.push_back({name, {*g}, {*w}});
  };
  const auto array = [&](const char* name, const std::optional<std::vector<int64_t>>& g,
                         const std::optional<std::vector<int64_t>>& w) {
    if (g) out.push_back({name, *g, *w});
  };
  scalar("max_seqlen_q", got.max_seqlen_q, full.max_seqlen_q);
  scalar("max_seqlen_kv", got.max_seqlen_kv, full.max_seqlen_kv);
  array("indices_q", got.indices_q, full.indices_q);
  array("indices_kv", got.indices_kv, full.indices_kv);
  return out;
}

}  // namespace attn_oracle::model
