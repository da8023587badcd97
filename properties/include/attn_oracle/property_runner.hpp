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
// A run is `cases` draws. Draw k comes from a Random keyed by (seed, k) at size
// k mod (max_size + 1) spread evenly (RapidCheck's schedule), so any subset of
// the draws can run on its own: shard i of n takes the draws k = i mod n, and n
// shards together are exactly the unsharded run. A draw passes, is declined
// (the backend does not support it, or it says nothing about this property:
// counted per reason), or fails. A failure is shrunk (the first shrink that
// still fails, again and again: RapidCheck's strategy), checked twice more
// (a backend whose answer changes is reported as nondeterministic), written as
// a case file with the property record that replays it, and the run goes on
// to the end of its budget: every failing draw is kept and clustered by root
// (triage.hpp), and the max_failures highest-ranked clusters are shown in full.
// Only RapidCheck's public generator API is used (Gen, Random, Shrinkable).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/case_op.hpp"
#include "attn_oracle/draw_settings.hpp"
#include "attn_oracle/failure_store.hpp"
#include "attn_oracle/property_check.hpp"
#include "attn_oracle/triage.hpp"

namespace attn_oracle {

// What a property's draw depends on besides RapidCheck's Random: the backend
// (its outputs and declines shape a draw), its domain, the domain the run
// draws in and the size profile. Built once per run of a property on a backend
// (draw_context), so that no draw re-derives a domain.
struct DrawContext {
  Backend& backend;
  InputDomain declared;  // backend.domain(): kv_buffer draws keep their own sizes
  InputDomain domain;    // drawing_domain(declared, shape_stable): what the other draws are drawn in
  SizeProfile profile = SizeProfile::ci;
};
DrawContext draw_context(Backend& backend, const DrawSettings& settings);

struct PropertyDef {
  std::string id;        // "metadata/matchesReference": reads as a sentence
  Capability needs;      // skipped, with the reason, on a backend without it
  std::string summary;   // one line for reports
  std::function<Case(const DrawContext&)> draw;        // one case, from generators
  std::function<void(Backend&, const Case&)> check;    // fail_case / decline_case
  std::optional<Capability> also_needs = std::nullopt;  // a second capability, skipped likewise
  std::vector<Output> needs_outputs = {};  // skipped, with the reason, on a backend that does not produce one
  // Why this property cannot draw inside a backend's domain (input_domain.hpp):
  // it needs padding, extra dims, positions away from 0, ... Skipped with the
  // reason before any draw; nullopt (or no function) when it can.
  std::function<std::optional<std::string>(const InputDomain&)> excluded_by = {};
  // The K/V buffer steps it calls (backend.hpp): skipped, with the reason, on a
  // backend that serves micro_sequence without them.
  std::vector<KvBufferStep> needs_kv_steps = {};
};

// Why `property` is skipped on the context's backend before any draw: a
// capability or an output it lacks, or a domain that excludes what the
// property needs.
std::optional<std::string> skipped_before_drawing(const PropertyDef& property, const DrawContext& context);

// The optional outputs (attention.hpp) a property of this capability would
// judge that the backend does not produce: "lse" for a backend without lse.
std::vector<std::string> outputs_not_compared(const PropertyDef& property, const ProducedOutputs& produced);

// The seed of every run that is not given one: runs are reproducible by default.
inline constexpr uint64_t kDefaultSeed = 20261122;

struct RunSettings {
  int cases = 100;        // draws per property
  int max_size = 100;     // RapidCheck size; kept <= 100
  uint64_t seed = kDefaultSeed;
  int shard_index = 0, shard_count = 1;  // this process runs draws k with k % count == index
  int max_failures = 3;   // failure clusters shown in full per property (the others get a line each)
  DrawSettings draws;     // the size profile and the size menu of the draws
  std::string failures_dir = "attn-oracle-failures";  // where counterexample case files go (failure_store.hpp)
  // Whether failures_dir is also a failure store: its failures replayed first,
  // new ones kept for the next run. Off here, so that a test's result never
  // depends on an earlier run; `check` and the conformance binaries turn it on
  // (ATTN_ORACLE_STORE, --store DIR, --no-store: harness/settings.hpp).
  bool use_store = false;
  bool replay_store = true;  // false once a stored case crashed the child replaying it (isolation.hpp)
  std::string program = "attn-oracle";  // the command the printed replay and rerun lines start with
  // Where a resumed run starts (isolation.hpp: after a crash, a fresh child
  // goes on from the next draw) and the failures it has already reported.
  int first_draw = 0;
  std::set<std::string> known_signatures;  // Triage groups shrunk already
  // Called with every case that passed (the coverage tally).
  std::function<void(const Case&)> on_case_passed;
  // Called before each trial: draw k, and the shrink path from draw k to the
  // case being tried (empty in the search). A supervising process learns from
  // it which case a crash happened in (isolation.hpp).
  std::function<void(int draw, const std::vector<size_t>& path)> before_trial;
  // Called after each draw of the search with "passed", "declined" or "failed".
  std::function<void(int draw, std::string_view kind)> after_draw;
  // Called with each distinct failure once it is shrunk and written (or replayed from the store).
  std::function<void(const struct PropertyFailure&)> on_failure;
  // Called before each stored case is checked, and with what the replay found.
  std::function<void(const std::string& case_path)> before_stored_case;
  std::function<void(const StoreReplay&)> on_store_replayed;
};

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

using ProgressFn = std::function<void(int draws_done, int draws_total)>;

PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             const ProgressFn& progress = {});

// Draw k of a run, walked down `path` (shrink indices), then checked: what a
// supervising process asks a fresh child for when it shrinks a crash.
// `before_check` sees the case first (the child writes it to a file there).
struct TrialResult {
  enum class Kind { passed, failed, declined, no_such_shrink };
  Kind kind = Kind::passed;
  std::string message;
};
TrialResult run_draw(const PropertyDef& property, Backend& backend, const RunSettings& settings, int draw,
                     const std::vector<size_t>& path, const std::function<void(const Case&)>& before_check = {});

// The check of `property` on one case: PASS, FAIL with "<id>: <message>" as its
// first line, or SKIP when the backend lacks a capability or the check declines.
Judgement check_property(const PropertyDef& property, Backend& backend, const Case& c);
// check_property of the property a counterexample records (c.property->id).
Judgement check_recorded_property(Backend& backend, const Case& c);

// "q_offsets of row #" for "q_offsets of row 3: backend 1, expected 2": what
// tells two failures of a property apart.
std::string failure_signature(const std::string& message);

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

// Every property of the suite, in report order.
const std::vector<PropertyDef>& all_properties();
const PropertyDef* find_property(const std::string& id);

// Per API area (metadata_properties.cpp, attention_properties.cpp, ...).
std::vector<PropertyDef> metadata_properties();
std::vector<PropertyDef> attention_properties();
std::vector<PropertyDef> oracle_arithmetic_properties();  // the oracle's own arithmetic, on every backend's run
std::vector<PropertyDef> small_seq_properties();
std::vector<PropertyDef> kv_buffer_properties();
std::vector<PropertyDef> sharding_properties();

}  // namespace attn_oracle
