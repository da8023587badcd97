// metadata.hpp: the metadata of docs/semantics.md#3-metadata, produced by every backend with
// the metadata capability and compared exactly (never with a tolerance).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline model {

struct Metadata {
  Shape extra;                     // broadcast extra leading dims
  int64_t batch = 0;               // B
  int64_t max_segments = 0;        // M
  std::vector<int64_t> q_seqlens;  // [..., B, M]   valid q tokens of slot k (document k+1)
  std::vector<int64_t> kv_seqlens; // [..., B, M]
  std::vector<int64_t> q_offsets;  // [..., B, M+1] row-local first valid token, compacted, -1 pad
  std::vector<int64_t> kv_offsets; // [..., B, M+1]
  // Compacted over documents with valid tokens (rows in row-major order): S+1 entries each.
  std::vector<int64_t> cu_seqlens_q;       // [S+1], starts at 0
  std::vector<int64_t> cu_seqlens_kv;      // [S+1]
  std::vector<int64_t> ragged_offsets_q;   // [S+1], row*Tq + start; last = rows*Tq
  std::vector<int64_t> ragged_offsets_kv;  // [S+1], row*Tkv + start; last = rows*Tkv

  // What some stacks hand their kernels besides lengths (Megatron's and transformers'
  // max_seqlen, transformers' unpad indices). All follow from the fields above
  // (derived_metadata), so the reference leaves them empty; a backend that returns
  // one is judged on it exactly.
  std::optional<int64_t> max_seqlen_q, max_seqlen_kv;  // longest document's valid tokens; 0 with none
  std::optional<std::vector<int64_t>> indices_q;       // [N]: row*Tq + t of every valid token, cu_seqlens order
  std::optional<std::vector<int64_t>> indices_kv;      // [N]: row*Tkv + t

  int64_t documents() const { return cu_seqlens_q.empty() ? 0 : int64_t(cu_seqlens_q.size()) - 1; }
  bool operator==(const Metadata&) const = default;
};

// `md` with its optional fields filled from cu_seqlens and ragged_offsets.
Metadata derived_metadata(Metadata md);

// The optional fields `got` returns, each with its value derived from `want` (in
// the order above), as (name, got, expected) with scalars as one-element vectors.
struct OptionalMetadataField {
  const char* name;
  std::vector<int64_t> got, want;
};
std::vector<OptionalMetadataField> returned_optional_fields(const Metadata& got, const Metadata& want);

}  // namespace attn_oracle::model
