// reference_backend.hpp: the float64 oracle behind the backend seam, named
// "reference": properties run on it (self-consistency), `eval` prints ground
// truth with it, and replay compares every other backend with it.
#pragma once

#include <memory>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline cases {

std::unique_ptr<Backend> make_reference_backend();
// Its K/V buffer capability (stateless): the float64 steps of reference/kv_buffer.hpp.
KvBufferCapability& reference_kv_buffer();
// Adds "reference" to the registry (idempotent).
void register_reference_backend();

}  // namespace attn_oracle::cases
