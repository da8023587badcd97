// conformance_defaults.hpp: where a conformance binary puts its counterexamples
// and results, and which lists it applies, unless the environment says
// otherwise. attn_oracle_add_conformance() compiles a call to
// set_conformance_defaults into the binary (its build directory and the files
// the CMake call named), so the binary behaves the same under ctest and by hand.
#pragma once

#include <string>

namespace attn_oracle {

struct ConformanceDefaults {
  std::string failures_dir;  // ATTN_ORACLE_FAILURES_DIR
  std::string results_dir;   // ATTN_ORACLE_RESULTS_DIR
  std::string xfails_file;   // ATTN_ORACLE_XFAILS
  std::string skips_file;    // ATTN_ORACLE_SKIPS
};

// Records the defaults; returns true (so that it can initialise a static).
bool set_conformance_defaults(ConformanceDefaults defaults);
// Sets each variable the environment does not already set from the defaults,
// and ATTN_ORACLE_STORE to "on" (failure_store.hpp): a conformance binary
// replays the failures of its last run first.
void apply_conformance_defaults();

}  // namespace attn_oracle
