// run_outcome.hpp: what a property run gives back (run_settings.hpp: what it
// is given): each distinct failure (shrunk, written, with the lines that
// replay and rerun it), the outcome with its counts, clusters and store replay,
// and the failures ranked for the reports (triage.hpp clusters them).
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/runner/run_settings.hpp"
#include "attn_oracle/runner/triage.hpp"

namespace attn_oracle::inline runner {

// What the replay of a property's stored cases found (PropertyOutcome::store).
struct StoreReplay {
  int replayed = 0;       // stored cases checked
  int still_failing = 0;
  int now_passing = 0;    // passed, or were declined: they no longer fail
  int retired = 0;        // deleted after kRetirePassingRuns passing runs
  int unreadable = 0;     // files the current code cannot read: skipped
  std::vector<std::string> notes;  // one line per retired or unreadable case
  bool empty() const { return replayed == 0 && unreadable == 0 && notes.empty(); }
};

// "2 saved failures replayed: 1 still fails, 1 now passes", then the notes;
// nothing when the store had nothing for this property.
std::vector<std::string> store_lines(const StoreReplay& r);
// "saved failure" or "saved failures", for n of them.
std::string stored_case_word(int n);
// Sums the replays of two parts of one property's run.
void merge_store_replay(StoreReplay& into, const StoreReplay& add);
// The "store" object of a report's result (report.hpp), and back.
nlohmann::ordered_json store_replay_to_json(const StoreReplay& r);
StoreReplay store_replay_from_json(const nlohmann::json& j);

// One distinct failure of a property: shrunk, written, and how to get back to it.
struct PropertyFailure {
  std::string message;    // the check's one-line message (or "nondeterministic backend: ...")
  std::string signature;  // the Triage group of the draw it was shrunk from
  std::string cluster;    // the key of its FailureCluster
  Case counterexample;    // with its PropertyRecord
  int draw = 0;           // the draw it was found at
  int shrinks = 0;
  bool nondeterministic = false;
  bool from_store = false;  // a stored case of an earlier run that still fails (failure_store.hpp)
  std::string case_path, replay_command, rerun_command;
  std::string repro_command;  // writes a standalone reproduction (`repro`, repro.hpp)
  std::string backend_log;  // the end of a worker process's stderr, when the backend is one (process_backend.hpp)
};

struct PropertyOutcome {
  enum class Status { passed, failed, skipped };
  Status status = Status::passed;
  std::string property, backend, backend_version;
  uint64_t seed = 0;
  int drawn = 0, passed = 0, declined = 0, failed = 0;  // draws of this process
  // Draws neither declined nor skipped: what the verdict rests on.
  int judged() const { return passed + failed; }
  std::map<std::string, int> decline_reasons;  // reason (numbers blanked) -> draws
  // Reason (numbers blanked) -> the first message blanked to it: the blanked key
  // groups "head_dim 96" with "head_dim 40", people read the example.
  std::map<std::string, std::string> decline_examples;
  const std::string& decline_example(const std::string& reason) const {
    const auto it = decline_examples.find(reason);
    return it == decline_examples.end() ? reason : it->second;
  }
  // class ("mask causal", "dtype bf16", "backward") -> (draws, declined draws)
  std::map<std::string, std::pair<int, int>> classes;
  std::vector<PropertyFailure> failures;       // shrunk, one per cluster shown in full, highest rank first
  std::vector<FailureCluster> clusters;        // every failing draw's cluster, ranked (triage.hpp)
  std::string failure_summary;                 // "2 input classes rejected or answered wrongly; no wrong answer ..."
  int shrunk = 0, shrink_trials = 0;           // draws shrunk, and the trials that cost
  StoreReplay store;                           // what replaying the failure store found
  std::string message;                         // why it was skipped
  // Worst error / budget of the float tolerance checks of passing draws;
  // nullopt for exact properties.
  std::optional<double> worst_ratio;
  std::vector<std::string> not_compared;  // outputs_not_compared: "lse not compared" in every summary
  std::map<std::string, int> mix;   // what the draws held: "mask causal", "dtype bf16 fwd", "layout GQA", labels
  CaseSize largest;                 // the largest draw
  double seconds = 0.0;
  // The search's draws (shrinking and the store's replays left out): their
  // time, and the part of it spent inside the backend's calls
  // (backend_calls.hpp); the rest is the suite's (generation, the float64
  // oracle, the naive run of the tolerance rule, the checks).
  double draw_seconds = 0.0, backend_seconds = 0.0;
  double suite_seconds() const { return std::max(0.0, draw_seconds - backend_seconds); }
};
std::string_view to_string(PropertyOutcome::Status status);
// What a draw held, as PropertyOutcome::mix counts it and the draw log's features name it:
// "op attention", "mask causal", "layout GQA", "dtype bf16 fwd".
std::vector<std::string> mix_keys(const Case& c);
// Sets the status from the counts: failed with a failure, skipped (with the
// most frequent reason) when every draw was declined, else passed.
void settle_status(PropertyOutcome& o);
// "every bf16 draw was declined (12 draws)" for each class drawn at least three
// times and declined every time: a backend that declines all backward problems
// shows here, not as a quiet pass.
std::vector<std::string> wholly_declined_classes(const PropertyOutcome& o);
// "lse not compared (the backend does not produce it)", or "" when all were.
std::string not_compared_line(const PropertyOutcome& o);
// "judged only 7 of 100 draws" when a passing property judged fewer than a
// tenth of its draws (the rest declined: a pass that says little, shown as
// "passed, but judged only 7 of 100 draws"), else "". The verdict stays passed.
std::string thin_judgement(const PropertyOutcome& o);

// The outcome, a failure and a cluster as JSON (a report's result, an isolated
// child's report to its parent), and back; a field a reader lacks takes its default.
nlohmann::ordered_json outcome_to_json(const PropertyOutcome& o);
PropertyOutcome outcome_from_json(const nlohmann::json& j);
nlohmann::ordered_json failure_to_json(const PropertyFailure& f);
PropertyFailure failure_from_json(const nlohmann::json& j);
nlohmann::ordered_json cluster_to_json(const FailureCluster& c);
FailureCluster cluster_from_json(const nlohmann::json& j);
// Sums `add` into `into`: the same property on the same backend, over other
// draws (another shard, or the draws after a crash). Failures join by signature;
// the status is left to the caller.
void merge_outcome(PropertyOutcome& into, const PropertyOutcome& add);

// Sets f's replay line (its case_path on `backend`) and rerun line (the
// property with the run's seed and budget; `this_run` false for a stored case,
// which no seed of this run reproduces: the property alone).
void set_replay_commands(PropertyFailure& f, const RunSettings& s, const std::string& backend,
                         const std::string& property, bool this_run);

// Text as one word of a POSIX shell command line, quoted only when it needs to
// be (an `exec:COMMAND` backend name), for the replay and rerun lines.
std::string shell_word(const std::string& text);
// A backend name as one directory name: characters other than letters, digits,
// '.', '_', '-' become '_' (an `exec:` command holds spaces and slashes).
std::string backend_dir_name(const std::string& backend);
// The signature of a crash or a hang (isolation.hpp): one per property.
inline constexpr std::string_view kCrashSignature = "crash";

// Orders the outcome's clusters by rank (then draws, then first draw), gives
// every failure a cluster, keeps the first `shown` clusters' failures in
// PropertyOutcome::failures (the others' stay one line each), and sets the
// verdict's message when no failure is a wrong answer on an ordinary input.
// Idempotent: the supervising process calls it again after merging children.
void rank_failures(PropertyOutcome& outcome, int shown);
// The failures of an outcome as printed, one entry per cluster in rank order:
// its heading ("[2] wrong answer on an input class (a side with no tokens), 31
// draws from draw 2"), its shown failure or, for the others, the example
// message, and its decline. An outcome without clusters lists its failures.
struct TriageEntry {
  std::string heading;
  const PropertyFailure* failure = nullptr;  // shown in full; null: one line (heading + example)
  std::string example;
  std::string decline;
};
std::vector<TriageEntry> triage_entries(const PropertyOutcome& outcome);
// "40 failing draws in 3 clusters; 2 shrunk (87 trials), 1 one line", or "" without failures.
std::string triage_cost_line(const PropertyOutcome& outcome);

}  // namespace attn_oracle::runner
