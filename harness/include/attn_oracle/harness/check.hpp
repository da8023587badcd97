// check.hpp: `check`, every property on every chosen backend: a header saying
// what runs, a progress line per property and backend, each distinct failure
// (its one-line mismatch, the counterexample file, replay and rerun lines), the
// table, and report/conformance.{md,json} (report.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle::inline harness {

// The flags of `check`: each overrides what CheckEnvironment::settings holds.
struct CheckOptions {
  std::string backend = "all";         // a registered name, or "all"
  std::optional<int> cases;            // draws per property; default the settings' (RC_PARAMS max_success or 100)
  std::optional<uint64_t> seed;        // default the settings' (RC_PARAMS seed or kDefaultSeed)
  bool random_seed = false;            // --seed random: a fresh seed, printed
  std::string filter;                  // comma-separated id prefixes (a property matching any runs); matching none is an error
  std::string skips_file, xfails_file; // test_lists.hpp
  bool deep = false;                   // nightly: 10x the draws
  std::string report_dir = "report";   // conformance.md and conformance.json go here
  std::string junit_xml;               // --junit-xml FILE: the report as JUnit XML too (ci_output.hpp)
  bool github_annotations = false;     // --github-annotations: an ::error line per failure on stdout
  std::string devices;                 // --devices 0,1,...: a child check per device (devices.hpp)
  std::string draw_log;                // --log-draws FILE: a JSON line per draw (runner/draw_log.hpp)
  std::string coverage_file;           // --require-coverage FILE: judged draws per class (coverage_targets.hpp)
  std::vector<std::string> arguments;  // check's own arguments as given: what the children of --devices get
  std::optional<Shard> shard;  // default the settings' (a conformance binary's GoogleTest shard)
  std::optional<SizeProfile> profile;  // --profile; default the settings' (ATTN_ORACLE_PROFILE)
  bool shape_stable = false;           // --shape-stable, or the settings' (ATTN_ORACLE_SHAPE_STABLE)
  int max_failures = 3;                // distinct failures per property
  bool isolate = true;                 // each property in a child process (isolation.hpp), unless the backend isolates itself
  double case_timeout_seconds = 120;   // a draw that runs longer in a child is a hang
  bool list = false;                   // --list: print the ids of the properties that would run, run nothing
  bool describe = false;               // --describe: the same ids, each with its one-line description
  // The failure store (failure_store.hpp): on, in the failures directory,
  // unless the settings' ATTN_ORACLE_STORE says otherwise; --store DIR puts it
  // (and every counterexample) in DIR; --no-store replays nothing and keeps nothing.
  std::optional<std::string> store_dir;
  bool no_store = false;
};

// What the program knows beyond the backend registry: its own name (the
// command printed replay lines and child processes start with), the versions
// of what its backends were built with, and the settings its edge resolved.
struct CheckEnvironment {
  std::string program = "attn-oracle";
  std::vector<std::pair<std::string, std::string>> versions;  // CUDA, cuDNN, device
  std::string backends_note;  // why a backend the program could have is absent
  std::string fixtures_dir;   // `export`'s default fixture directory ("": none)
  Settings settings;          // from the environment over the program's defaults (settings.hpp)
};

// Runs the check, prints to stdout (progress on stderr) and writes the report;
// returns the process exit status: 0 when nothing failed the run, 1 on a failure
// (or an XPASS, an unreadable list, a filter that matches nothing), 130 when
// interrupted (SIGINT), in which case the report holds the finished properties.
int run_check_command(const CheckOptions& options, const CheckEnvironment& environment);

}  // namespace attn_oracle::harness
