// coverage.hpp: `attn-oracle coverage [--markdown]`, what the suite exercises.
//
// Not written by hand: every property of the registry runs a fixed number of
// cases with a fixed seed on the first registered backend that has its
// capabilities, and each case it passes is tallied by op x mask kind, with the
// layouts (one row or several, extra dims, cross attention, window, GQA) and
// dtypes (forward / forward+backward) seen. The text form then lists, per
// property, how many passing draws sat on each validity rule's edge and broke
// each rule (the "edge ..." and "rule ..." labels of independent_rules.hpp).
// README.md embeds the Markdown form
// between coverage markers, and tests/readme_coverage_test.cpp checks that it
// is current.
#pragma once

#include <string>

namespace attn_oracle::inline harness {

inline constexpr int kCoverageCasesPerProperty = 200;
inline constexpr uint64_t kCoverageSeed = 20261122;

// The coverage table as Markdown (markdown) or aligned text.
std::string coverage_table(bool markdown);

}  // namespace attn_oracle::harness
