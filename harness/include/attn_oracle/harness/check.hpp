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
  std::string skips_file, xfails_file; // test-id prefixes (BACKEND/PROPERTY), one a line
  bool deep = false;                   // nightly: 10x the cases, max_size 100
  std::string report_dir = "report";   // conformance.md and conformance.json go here
};

// Runs the check, prints to stdout (progress on stderr) and writes the report;
// returns the process exit status: 0 when nothing failed unexpectedly, 1 on an
// unexpected failure (or an unreadable list), 130 when interrupted (SIGINT), in
// which case the report holds the properties finished so far.
int run_check_command(const CheckOptions& options);

}  // namespace attn_oracle
