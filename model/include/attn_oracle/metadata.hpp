// metadata.hpp: the metadata of DESIGN section 4, produced by every backend with
// the metadata capability and compared exactly (never with a tolerance).
#pragma once

#include <cstdint>
#include <vector>

#include "attn_oracle/packed_batch.hpp"

namespace attn_oracle {

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

  int64_t documents() const { return cu_seqlens_q.empty() ? 0 : int64_t(cu_seqlens_q.size()) - 1; }
  bool operator==(const Metadata&) const = default;
};

}  // namespace attn_oracle
