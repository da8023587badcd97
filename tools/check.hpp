// check.hpp: `attn-oracle check`, every property on every chosen backend, with a
// progress line per (property, backend) and a closing table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn_oracle {

struct CheckOptions {
  std::string backend = "all";         // a registered name, or "all"
  std::optional<int> cases;            // RapidCheck max_success; default from RC_PARAMS or 100
  std::optional<uint64_t> seed;        // default from RC_PARAMS or random
  std::string filter;                  // run properties whose id starts with this
};

// Runs the check and prints to stdout; returns the process exit status
// (0 all passed or skipped, 1 any failure).
int run_check_command(const CheckOptions& options);

}  // namespace attn_oracle
