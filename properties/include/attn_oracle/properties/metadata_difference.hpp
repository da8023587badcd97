// metadata_difference.hpp: the first metadata entry a backend gets wrong, in one
// line, for the properties that compare metadata exactly.
#pragma once

#include <string>

#include "attn_oracle/model/metadata.hpp"

namespace attn_oracle::inline properties {

// "q_offsets[1, 2] (row 1, slot 2): backend 3, expected 4" for the first
// differing field (compacted fields are one-dimensional: "cu_seqlens_q[3]"), or "".
std::string first_difference(const Metadata& got, const Metadata& want);

}  // namespace attn_oracle::properties
