// sharding_bugs.hpp: planted sharding bugs (DESIGN section 8), caught and shrunk by
// tests/sharding_planted_test.cpp. Each is a backend whose devices run the float64
// reference and whose SimulatedSharding has one mistake a real stack made.
#pragma once

#include <vector>

#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {

std::vector<PlantedBug> sharding_bugs();

}  // namespace attn_oracle::planted
