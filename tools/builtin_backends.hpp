// builtin_backends.hpp: every backend this build ships, for the programs that
// offer them all (the attn-oracle CLI, the in-repository tests): the reference
// (properties/) and the production backends (backends/). A vendor's binary
// registers its own instead.
#pragma once

#include <string>

#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace attn_oracle::inline tools {

inline void register_builtin_backends() {
  register_reference_backend();
  register_production_backends();
}

inline std::string builtin_backends_note() { return production_backends_note(); }

}  // namespace attn_oracle::tools
