// isolation.hpp: a backend that crashes (a segfault, an abort, a heap it
// corrupts) or hangs must not take the run with it. run_property_isolated runs
// the property in a child process (this same executable, started afresh, so a
// CUDA context never crosses a fork) and supervises it:
//  - the child reports over a pipe (fd 3) each trial it is about to run (draw k
//    and shrink path) and, at the end, the outcome as JSON;
//  - when the child dies on a signal or by an exit without an outcome, or goes
//    longer than the case time limit without starting a trial, the trial in
//    flight is the one that crashed or hung. The supervisor then shrinks it the
//    way the runner shrinks a failure: candidates (draw k walked down a path)
//    go one after another to a child that answers each, and a new child takes
//    over after every crash. The smallest candidate that still crashes or hangs
//    is run once more alone, in a fresh child that writes it as a case file
//    first, and reported as a failure of the property; a new child then goes on
//    with the draw after the crash (after a hang, the property ends there).
// The children are the `__child-property`, `__child-trials` and `__child-trial`
// verbs of every program built on the harness (the attn-oracle CLI, a vendor's
// conformance binary).
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle::inline harness {

struct IsolationSettings {
  std::string program;                  // printed in replay lines (the executable itself is /proc/self/exe)
  double case_timeout_seconds = 120.0;  // a trial that runs longer is a hang
};

PropertyOutcome run_property_isolated(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                                      const IsolationSettings& isolation, RunListener* listener = nullptr);

// True for the verbs the supervisor starts children with.
bool is_isolation_child_verb(const std::string& verb);
// Runs one child verb in this process; returns its exit status.
int run_isolation_child(const std::vector<std::string>& args);

}  // namespace attn_oracle::harness
