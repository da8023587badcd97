// conformance_defaults.cpp: see conformance_defaults.hpp.
#include "attn_oracle/harness/conformance_defaults.hpp"

#include <cstdlib>
#include <utility>

namespace attn_oracle {
namespace {

ConformanceDefaults& stored() {
  static ConformanceDefaults defaults;
  return defaults;
}

}  // namespace

bool set_conformance_defaults(ConformanceDefaults defaults) {
  stored() = std::move(defaults);
  return true;
}

void apply_conformance_defaults() {
  const ConformanceDefaults& d = stored();
  for (const auto& [name, value] : {std::pair{"ATTN_ORACLE_FAILURES_DIR", &d.failures_dir},
                                    std::pair{"ATTN_ORACLE_RESULTS_DIR", &d.results_dir},
                                    std::pair{"ATTN_ORACLE_XFAILS", &d.xfails_file},
                                    std::pair{"ATTN_ORACLE_SKIPS", &d.skips_file}})
    if (!value->empty()) setenv(name, value->c_str(), /*overwrite=*/0);
  // A conformance binary keeps its failures for the next run (failure_store.hpp)
  // unless told otherwise: ATTN_ORACLE_STORE=off, or a directory.
  setenv("ATTN_ORACLE_STORE", "on", /*overwrite=*/0);
}

}  // namespace attn_oracle
