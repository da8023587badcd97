// property_runner.hpp: runs one property on one backend with RapidCheck and turns
// the result into an outcome the CLI, the GoogleTest glue and the planted-bug
// tests all read: passed / failed / skipped, cases run, and on failure the shrunk
// counterexample as a case file with its replay line.
//
// A property body draws its inputs with `*gen`, asserts with RC_ASSERT, and tells
// the recorder which case it is looking at. RapidCheck shrinks by re-running the
// body; every accepted shrink step is a failing run, so the last failing case the
// recorder saw is the minimal counterexample.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"

namespace attn_oracle {

class CaseRecorder {
 public:
  void current(Case c) { current_ = std::move(c); }
  void clear_current() { current_.reset(); }  // before each case: no stale case
  void keep_current_as_failing() {
    if (current_) failing_ = current_;
  }
  const std::optional<Case>& failing() const { return failing_; }
  const std::optional<Case>& current_case() const { return current_; }

 private:
  std::optional<Case> current_, failing_;
};

struct PropertyDef {
  std::string id;        // "metadata/matchesReference": reads as a sentence
  Capability needs;      // skipped, with the reason, on a backend without it
  std::string summary;   // one line for reports
  std::function<void(Backend&, CaseRecorder&)> body;  // one RapidCheck case
  std::optional<Capability> also_needs = std::nullopt;  // a second capability, skipped likewise
};

struct RunSettings {
  int max_success = 100;  // cases per property
  int max_size = 100;     // RapidCheck size; kept <= 100
  uint64_t seed = 0;
  std::string failures_dir;  // where counterexample case files go
  bool quiet = false;        // no counterexample printing to stderr
  // Called with the recorded case of every case that passed (coverage tally).
  std::function<void(const Case&)> on_case_passed;
};

// Defaults from RC_PARAMS (max_success, max_size, seed) and ATTN_ORACLE_FAILURES_DIR.
// RapidCheck draws a random seed when RC_PARAMS names none; `seed_if_unset`
// (non-zero) replaces that one, for runs that must be reproducible (planted bugs).
RunSettings default_run_settings(uint64_t seed_if_unset = 0);

struct PropertyOutcome {
  enum class Status { passed, failed, skipped, gave_up };
  Status status = Status::passed;
  std::string property, backend;
  int cases = 0;                  // successful cases run
  // Worst error / budget of the float tolerance checks made during the run
  // (ToleranceRatioSink), shrinking included; nullopt for exact properties.
  std::optional<double> worst_ratio;
  std::string message;            // failure description or skip reason
  std::optional<Case> counterexample;
  std::string case_path;          // written counterexample file
  std::string reproduce_params;   // RC_PARAMS="..." to rerun the same shrunk case
  std::string replay_command;     // attn-oracle replay --backend B CASE
};
std::string_view to_string(PropertyOutcome::Status status);

using ProgressFn = std::function<void(int cases_done, int cases_total)>;

PropertyOutcome run_property(const PropertyDef& property, Backend& backend,
                             const RunSettings& settings, const ProgressFn& progress = {});

// Every property of the suite, in report order.
const std::vector<PropertyDef>& all_properties();
const PropertyDef* find_property(const std::string& id);

// Per API area (metadata_properties.cpp, attention_properties.cpp,
// small_seq_properties.cpp).
std::vector<PropertyDef> metadata_properties();
std::vector<PropertyDef> attention_properties();
std::vector<PropertyDef> small_seq_properties();
std::vector<PropertyDef> kv_buffer_properties();  // kv_buffer_properties.cpp
std::vector<PropertyDef> sharding_properties();   // sharding_properties.cpp

}  // namespace attn_oracle
