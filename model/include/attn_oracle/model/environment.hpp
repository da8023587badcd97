// environment.hpp: every environment variable the project's programs read,
// each with what it means, and the one function that reads them.
//
// Only a program's edge calls read_environment(): the attn-oracle CLI's and a
// conformance binary's main, the Python module's init, a test or benchmark
// program. The edge resolves what it read, under its flags, into values it
// passes down (harness/settings.hpp: the run, the draws, the lists; the
// process-wide memory budget, reference threads and worker time limit are
// installed once through their set_ functions). Below the edge nothing reads
// the environment, and nothing writes it to tell another layer something:
// ctest's `environment_edges` test fails on a getenv or setenv anywhere else.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

namespace attn_oracle::inline model {

struct EnvironmentVariable {
  std::string_view name;
  std::string_view meaning;  // what it sets, its values and its default
};

// The variables, in the order docs/vendoring.md ("Settings at a glance") lists them.
std::span<const EnvironmentVariable> environment_variables();

// Name -> value of each listed variable that is set (an empty value counts as set);
// a listed name ending in '*' stands for every variable with that prefix.
using Environment = std::map<std::string, std::string, std::less<>>;

// The listed variables as this process's environment has them.
Environment read_environment();

// The value of `name`, or `otherwise` when it is unset or empty.
std::string environment_value(const Environment& environment, std::string_view name, std::string otherwise = "");

}  // namespace attn_oracle::model
