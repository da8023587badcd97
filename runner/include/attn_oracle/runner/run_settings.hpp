// run_settings.hpp: what a property run is told, kept apart as RapidCheck keeps
// TestParams apart from TestListener:
//  - RunSettings, plain values with one JSON form: what `check` resolves at the
//    program's edge (harness/settings.hpp) and what an isolated child is given
//    (harness/isolation.hpp: `--settings JSON`), so the two never drift;
//  - ResumePoint, where a run picks up after an isolated child died: the next
//    draw, the failures already reported, whether the store was replayed;
//  - RunListener, what the run tells its caller as it goes: progress, each
//    draw and trial, each failure, the store's replay.
// The run's results come back as its PropertyOutcome (run_outcome.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case.hpp"
#include "attn_oracle/properties/draw_settings.hpp"

namespace attn_oracle::inline runner {

// The seed of every run that is not given one: runs are reproducible by default.
inline constexpr uint64_t kDefaultSeed = 20261122;

// This process runs the draws k with k % count == index (index from 0).
struct Shard {
  int index = 0, count = 1;
  bool operator==(const Shard&) const = default;
};
// "2/3" for index 1 of 3: the one spelling, 1-based, of `--shard`, reports and settings JSON.
std::string to_string(Shard shard);
// "I/N" with 1 <= I <= N, as to_string writes it; nullopt for anything else.
std::optional<Shard> parse_shard(std::string_view text);
// How many of draws 0..cases-1 fall in the shard.
int draws_in_shard(int cases, Shard shard);

struct RunSettings {
  int cases = 100;        // draws per property
  int max_size = 100;     // RapidCheck size; kept <= 100
  uint64_t seed = kDefaultSeed;
  Shard shard;
  int max_failures = 3;   // failure clusters shown in full per property (the others get a line each)
  DrawSettings draws;     // the size profile and the size menu of the draws
  std::string failures_dir = "attn-oracle-failures";  // where counterexample case files go (failure_store.hpp)
  // Whether failures_dir is also a failure store: its failures replayed first,
  // new ones kept for the next run. Off here, so that a test's result never
  // depends on an earlier run; `check` and the conformance binaries turn it on
  // (ATTN_ORACLE_STORE, --store DIR, --no-store: harness/settings.hpp).
  bool use_store = false;
  std::string program = "attn-oracle";  // the command the printed replay and rerun lines start with
  std::string draw_log;  // a file each search draw is appended to as a JSON line (draw_log.hpp); "": none
};
// Every field by name; from_json takes what to_json wrote (a missing field
// keeps its default) and throws nlohmann::json's errors on a wrong type.
nlohmann::ordered_json to_json(const RunSettings& s);
RunSettings run_settings_from_json(const nlohmann::json& j);

// Where a run starts: the first draw (a fresh child goes on after the draw
// that crashed the one before), the failure groups shown already (Triage
// signatures), and whether the store is still to be replayed (not after a
// stored case crashed a child).
struct ResumePoint {
  int first_draw = 0;
  std::set<std::string> known_signatures;
  bool replay_store = true;
};
nlohmann::ordered_json to_json(const ResumePoint& r);
ResumePoint resume_point_from_json(const nlohmann::json& j);

struct PropertyFailure;
struct StoreReplay;

// What a run reports while it runs; every method does nothing unless overridden.
// A supervising process learns from before_trial which case a crash happened
// in, and from the others what its child found before it died (isolation.hpp).
class RunListener {
 public:
  virtual ~RunListener() = default;
  // Before each trial: draw k, and the shrink path from draw k to the case being tried (empty in the search).
  virtual void before_trial(int /*draw*/, const std::vector<size_t>& /*path*/) {}
  // After each draw of the search: "passed", "declined" or "failed"; then the draws done of this process's total.
  virtual void after_draw(int /*draw*/, std::string_view /*kind*/) {}
  virtual void progress(int /*draws_done*/, int /*draws_total*/) {}
  // Each case that passed (the coverage tally).
  virtual void case_passed(const Case&) {}
  // Each distinct failure once it is shrunk and written (or replayed from the store).
  virtual void failure_found(const PropertyFailure&) {}
  // Before each stored case is checked, and with what the store's replay found.
  virtual void before_stored_case(const std::string& /*case_path*/) {}
  virtual void store_replayed(const StoreReplay&) {}
};

}  // namespace attn_oracle::runner
