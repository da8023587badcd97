// planted_runner.hpp: how the planted-bug tests run a property against a planted
// backend. The run is reproducible (the fixed default seed unless RC_PARAMS
// names one) and must end in a failure
// with a counterexample; what "shrunk small" means differs by op and stays with
// each test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {

// kDefaultSeed unless RC_PARAMS names another.
inline RunSettings planted_settings() { return default_run_settings(); }

// Runs bug.property against bug.make() with planted_settings() into `o`; succeeds
// when the property failed with a counterexample. Use as ASSERT_TRUE(caught(bug, o)).
inline testing::AssertionResult caught(const PlantedBug& bug, PropertyOutcome& o) {
  const PropertyDef* property = find_property(bug.property);
  if (property == nullptr) return testing::AssertionFailure() << "no property " << bug.property;
  RunSettings settings = planted_settings();
  if (bug.seed != 0) settings.seed = bug.seed;
  o = run_property(*property, *bug.make(), settings);
  if (o.status != PropertyOutcome::Status::failed)
    return testing::AssertionFailure() << bug.name << " escaped " << bug.property;
  if (o.failures.empty() || o.failures.front().case_path.empty())
    return testing::AssertionFailure() << bug.name << " failed " << bug.property << " without a counterexample";
  return testing::AssertionSuccess();
}

}  // namespace attn_oracle::planted
