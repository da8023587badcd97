// metadata_case.hpp: `op: "metadata"` cases (docs/semantics.md#1-inputs to
// docs/semantics.md#3-metadata): the packed batch fields (mask, window, max_segments, q, kv).
// Evaluated by a backend's metadata capability; judged exactly (every integer and error code)
// against ref::metadata. Implemented in cases/src/metadata_op.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline cases {

struct MetadataCase {
  PackedBatch batch;
  bool operator==(const MetadataCase&) const = default;
};

// What eval prints: seqlens [..][B][M], offsets [..][B][M+1], then the compacted form.
nlohmann::json metadata_to_json(const Metadata& md);

}  // namespace attn_oracle::cases
