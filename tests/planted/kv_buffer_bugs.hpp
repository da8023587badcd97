// kv_buffer_bugs.hpp: planted K/V buffer bugs (DESIGN section 7), one per
// kv_buffer property; tests/kv_buffer_planted_test.cpp asserts each is caught
// and shrunk small. Not registered: the conformance suite never sees them.
#pragma once

#include <vector>

#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {

std::vector<PlantedBug> kv_buffer_bugs();

}  // namespace attn_oracle::planted
