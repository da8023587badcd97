// property_runner.hpp: the properties and the driver that runs one property on
// one backend.
//
// A property is a draw and a check. The draw builds a Case from RapidCheck
// generators (`*gen`, composed with gen::build / mapcat / weightedOneOf) and
// records any other value it drew (with_drawn, property_check.hpp); the check
// judges the backend on that case and reports with fail_case / decline_case.
// Because the check sees nothing but the case, a counterexample file re-runs it
// exactly (`attn-oracle replay`, replay.hpp).
//
// The driver follows RapidCheck's own search: case k of a run is drawn at size
// k mod (max_size + 1) (spread evenly), from a Random split off the run's seed,
// plus one size step per ten recent discards; a failing case is shrunk by taking
// the first shrink that still fails, until none does. It uses RapidCheck's
// public generator API only (Gen, Random, Shrinkable), so it can count declined
// draws, keep the failure message, and write the shrunk case with the property
// record that replays it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/case_op.hpp"
#include "attn_oracle/property_check.hpp"

namespace attn_oracle {

struct PropertyDef {
  std::string id;        // "metadata/matchesReference": reads as a sentence
  Capability needs;      // skipped, with the reason, on a backend without it
  std::string summary;   // one line for reports
  std::function<Case(Backend&)> draw;                  // one case, from generators
  std::function<void(Backend&, const Case&)> check;    // fail_case / decline_case
  std::optional<Capability> also_needs = std::nullopt;  // a second capability, skipped likewise
};

struct RunSettings {
  int max_success = 100;  // cases per property
  int max_size = 100;     // RapidCheck size; kept <= 100
  uint64_t seed = 0;
  std::string failures_dir;  // where counterexample case files go
  // Called with every case that passed (the coverage tally).
  std::function<void(const Case&)> on_case_passed;
};

// From RC_PARAMS (max_success, max_size, seed) and ATTN_ORACLE_FAILURES_DIR; a
// seed RC_PARAMS does not name is `seed_if_unset`, or a random one when that is 0.
RunSettings default_run_settings(uint64_t seed_if_unset = 0);

struct PropertyOutcome {
  enum class Status { passed, failed, skipped, gave_up };
  Status status = Status::passed;
  std::string property, backend;
  int cases = 0;       // cases that passed (plus the failing one)
  int declined = 0;    // draws the check or the draw declined
  int shrinks = 0;     // accepted shrink steps of a failure
  // Worst error / budget of the float tolerance checks made during the run
  // (ToleranceRatioSink), shrinking included; nullopt for exact properties.
  std::optional<double> worst_ratio;
  std::string message;  // the check's failure message, or the skip / give-up reason
  std::map<std::string, int> labels;  // classify() labels over the passing cases
  std::optional<Case> counterexample;  // with its PropertyRecord
  std::string case_path;               // written counterexample file
  std::string replay_command;          // attn-oracle replay --backend B CASE
  std::string rerun_command;           // attn-oracle check ... --seed S: the same run again
};
std::string_view to_string(PropertyOutcome::Status status);

using ProgressFn = std::function<void(int cases_done, int cases_total)>;

PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             const ProgressFn& progress = {});

// The check of `property` on one case: PASS, FAIL with "<id>: <message>" as its
// first line, or SKIP when the backend lacks a capability or the check declines.
Judgement check_property(const PropertyDef& property, Backend& backend, const Case& c);
// check_property of the property a counterexample records (c.property->id).
Judgement check_recorded_property(Backend& backend, const Case& c);

// Every property of the suite, in report order.
const std::vector<PropertyDef>& all_properties();
const PropertyDef* find_property(const std::string& id);

// Per API area (metadata_properties.cpp, attention_properties.cpp, ...).
std::vector<PropertyDef> metadata_properties();
std::vector<PropertyDef> attention_properties();
std::vector<PropertyDef> small_seq_properties();
std::vector<PropertyDef> kv_buffer_properties();
std::vector<PropertyDef> sharding_properties();

}  // namespace attn_oracle
