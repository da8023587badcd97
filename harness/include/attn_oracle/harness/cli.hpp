// cli.hpp: the command-line verbs every program built on the harness speaks:
// the attn-oracle CLI (tools/), and a vendor's conformance binary
// (attn_oracle_add_conformance), whose replay lines then work as printed.
//
//   eval, replay, repro, check, report merge, backends, promote, export, coverage, help
//   __child-property, __child-trial(s)   (isolation.hpp: started by `check` itself)
//
// The verbs are CLI11 subcommands with typed options; `--help` prints every
// one, `COMMAND --help` one. Their flags override the settings the program
// resolved at its edge (CheckEnvironment::settings, settings.hpp).
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/harness/check.hpp"

namespace attn_oracle::inline harness {

// True for a verb run_cli answers (a program's main dispatches those to it).
bool is_cli_verb(const std::string& word);
// Runs one command line (without the program name); returns the exit status.
int run_cli(const std::vector<std::string>& args, const CheckEnvironment& environment);

}  // namespace attn_oracle::harness
