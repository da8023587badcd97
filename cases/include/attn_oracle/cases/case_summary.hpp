// case_summary.hpp: a case in one to three lines, for people (the failure
// printout, the draw log's `representation`); the JSON stays in its file.
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/cases/case.hpp"

namespace attn_oracle::inline cases {

// "metadata causal_bottom_right M=2 | q ids [[1,2]] pos [[2,0]] | kv ids [[1,2]] pos [[3,0]]", the
// attention shape on a second line, a K/V-buffer problem in one line.
std::string case_summary(const Case& c);
// case_summary of a case file, line by line; one line saying why when it cannot be read.
std::vector<std::string> case_summary_lines(const std::string& path);

}  // namespace attn_oracle::cases
