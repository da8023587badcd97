// coverage_targets.hpp: how many judged draws of an input class a run must have
// (`check --require-coverage FILE`, docs/ci.md#coverage-targets-check---require-coverage-file). A
// target a line:
//
//   attention/matchesReference  layout keys 64k+1, head_dim>=64  >= 2  # the one-key last tile's rescale
//   attention/                  layout GQA>4                     >= 5  # a GQA group of 8
//
// The first word is a property prefix (or BACKEND/PROPERTY), the last two
// `>= N`, and what lies between is the class as the report names it
// (PropertyOutcome::classes: "mask causal", "dtype bf16", "backward",
// "layout document>=256", ...). A draw counts when it was judged (passed or
// failed), not declined. A result that misses a target fails the run, saying
// which class had how many; a target that matches no property of the run is
// warned about, as a list entry is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/harness/report.hpp"

namespace attn_oracle::inline harness {

class CoverageTargets {
 public:
  struct Target {
    std::string prefix, cls, reason;
    int at_least = 0, line = 0;
  };

  // nullopt, with `error` set, when the file cannot be read or a line is malformed.
  static std::optional<CoverageTargets> read(const std::string& path, std::string& error);

  // "layout GQA>4: 3 judged draws, the target is 5 (FILE:LINE: reason)" for each target r misses.
  std::vector<std::string> unmet(const CheckResult& r) const;
  // Fails a result that misses a target (a skipped one stays skipped: nothing ran to count).
  void apply(CheckResult& r) const;
  // "FILE:LINE: PREFIX matches no test" for every target no result of the run matches.
  std::vector<std::string> unmatched_warnings(const std::vector<CheckResult>& results) const;

 private:
  std::string path_;
  std::vector<Target> targets_;
};

}  // namespace attn_oracle::harness
