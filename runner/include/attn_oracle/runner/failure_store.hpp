// failure_store.hpp: the home of counterexamples, and the failures a run
// carries to the next one (as Hypothesis's example database does).
//
// Every shrunk counterexample (and every crash case) is written as
//
//   <failures dir>/<backend name>@<backend version>/<property id>/<hash>.case.json
//
// named by the code under test, not by how it was started: an `exec:` backend
// is named by its worker's hello (Backend::identity), so one worker started two
// ways has one directory. <hash> is a hash of the case alone (case_hash: its
// op, inputs and drawn values, without its note, seed or backend), so the same
// shrunk case found from two seeds is one file, and different cases never
// overwrite each other. A file is still an ordinary case file with its property
// record: `replay` and `promote` take it as it is.
//
// With the store on (RunSettings::use_store), the property directory's
// store.json also lists the cases the store keeps, and a run replays them
// before its first draw: a case that still fails is a failure of the property
// (not shrunk again; its signature is known, so the draws do not report it
// again), a case that passes is kept as fixed and retired (deleted) after
// kRetirePassingRuns passing runs in a row. A stored file that cannot be read
// is reported and skipped. A run replays once per property: not in shard
// i > 0, not when an isolated run resumes after a crash (ResumePoint::first_draw > 0).
// With the store off, counterexamples are written the same way but not listed:
// the next run replays nothing of them.
//
// Tested by tests/failure_store_test.cpp (the store through `check`) and
// python/tests/test_store.py (through python -m attn_oracle and pytest).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/runner/run_outcome.hpp"

namespace attn_oracle::inline runner {


// A stored case that passes this many runs in a row is deleted.
inline constexpr int kRetirePassingRuns = 3;


// "from the store", or "draw 3, 8 shrinks": where a printed counterexample came from.
std::string counterexample_origin(const PropertyFailure& f);

// A short hash (16 hex digits) of the case's canonical JSON without its note,
// expected result, schema, and the run-specific parts of its property record
// (seed, backend): what the case is, not where it was found.
std::string case_hash(const Case& c);

// <dir>/<name>@<version>/<property id>: a property's counterexamples on a backend.
std::string property_store_dir(const std::string& dir, const BackendIdentity& who, const std::string& property);

// Writes `c` (a counterexample of `property`, with its property record) as
// <hash>.case.json in its directory and, with the store on, lists it as
// failing. The absolute path written, or "" when it could not be written.
std::string keep_counterexample(const Case& c, const BackendIdentity& who, const std::string& property,
                                const RunSettings& s);

// Replays the stored cases of `property` on `backend` (when the store is on and
// `resume` is the start of the run's first shard): each still failing one joins
// out.failures (marked from_store), its signature joins resume.known_signatures,
// and `listener` hears of each; out.store says what was found.
void replay_stored_failures(const PropertyDef& property, Backend& backend, const RunSettings& s, ResumePoint& resume,
                            RunListener& listener, PropertyOutcome& out);

// One line per property directory under the backend's store directory whose
// property this build does not have: its cases are never replayed.
std::vector<std::string> orphaned_store_notes(const std::string& dir, const BackendIdentity& who);

}  // namespace attn_oracle::runner
