// report.hpp: what a conformance run found, and its two report files.
//
// report/conformance.json is for machines (schema attn-oracle.conformance/2),
// report/conformance.md for people: versions (attn-oracle and its commit, the
// compiler, CUDA, cuDNN, the device, every backend's), the settings (seed,
// cases, shards), then per property and backend the verdict, draws passed /
// declined (by reason) / failed, the worst error against the tolerance budget,
// the time, the drawn mix and the largest draw, and every distinct failure with
// its counterexample, replay and rerun lines. Apart from the times, the same
// seed gives the same bytes.
//
// A run split into shards (GoogleTest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX,
// or `check --shard I/N`) writes one report per shard; merge_reports joins them:
// the shards of a property draw disjoint sets of draws, so the merged counts
// are those of one unsharded run with the same seed and case count.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle::inline harness {

// passed / FAILED / skipped come from the property (or the skips list), xfail /
// XPASS from the expected-failure list. XPASS fails the run (a fixed bug must
// leave the list).
enum class Verdict { passed, failed, skipped, xfail, xpass };
std::string_view to_string(Verdict verdict);
inline bool fails_the_run(Verdict v) { return v == Verdict::failed || v == Verdict::xpass; }

struct CheckResult {
  PropertyOutcome outcome;
  Verdict verdict = Verdict::passed;
  std::string note;  // the list entry that applied: "expected failure (file:line: reason)"
  std::string id() const { return outcome.backend + "/" + outcome.property; }
};

struct BackendInfo {
  std::string name, version;
  std::vector<std::string> capabilities;
  std::string domain = "every input";  // to_string(Backend::domain())
  std::optional<WorkerStarts> worker_starts;  // a process backend's, after the run
};

struct CheckReport {
  bool interrupted = false;
  std::vector<std::pair<std::string, std::string>> versions;  // attn-oracle, commit, compiler, CUDA, cuDNN, device
  uint64_t seed = 0;
  int cases = 0, max_size = 0, max_failures = 0;
  std::string profile = "ci";  // the size profile the inputs were drawn from (ATTN_ORACLE_PROFILE)
  std::vector<std::string> shards;  // "1/2": the shards this report holds ("1/1" unsharded)
  std::string filter, skips_file, xfails_file, failures_dir;
  bool store = false;  // failures_dir is a failure store: its failures were replayed first
  std::vector<BackendInfo> backends;
  std::vector<std::string> warnings;
  std::vector<CheckResult> results;  // property-major, in registry order

  int count(Verdict v) const;
  int failures() const;  // results that fail the run
};

// A property's outcome as a result: its verdict under the expected-failure list
// (xfail when a listed property fails, XPASS when it passes), and the result of
// a property the skips list names (not run).
class TestIdList;
CheckResult verdict_of(PropertyOutcome outcome, const TestIdList* xfails, const std::string& arch = "");
CheckResult listed_skip(const std::string& property, const Backend& backend, const TestIdList& skips,
                        const std::string& arch = "");

// "0.42", "inf", or "-" when no tolerance check ran.
std::string format_ratio(const std::optional<double>& ratio);
// "passed 100 0.42", "FAILED 3 inf", "skipped": one table cell (verdict, draws passed, worst ratio).
std::string table_cell(const CheckResult& r);
// The verdict as printed: "passed, but judged only 7 of 100 draws" for a pass
// that rests on fewer than a tenth of its draws (thin_judgement), else the verdict.
std::string verdict_text(const CheckResult& r);

// What a draw cost on one backend, summed over its properties' search draws
// (PropertyOutcome::draw_seconds): the suite's part (generation, the float64
// oracle, the naive run, the checks) and the backend's.
struct DrawCost {
  std::string backend;
  int draws = 0;
  double seconds = 0.0, backend_seconds = 0.0;
  double suite_seconds() const { return std::max(0.0, seconds - backend_seconds); }
};
std::vector<DrawCost> draw_costs(const CheckReport& report);
// "cost per draw on cpu: 12.4 ms (the suite's oracle and checks 10.1 ms, the
// backend 2.3 ms) over 1900 draws, 80.5 draws/s".
std::string draw_cost_line(const DrawCost& cost);

// "worker starts: 1", or "worker starts: 3 (2 restarts after a crash, a hang or a protocol error)".
std::string worker_starts_line(const WorkerStarts& starts);

// attn-oracle's version and commit, and the compiler it was built with.
std::vector<std::pair<std::string, std::string>> suite_versions();


std::string report_json(const CheckReport& report);
std::string report_markdown(const CheckReport& report);
Expected<CheckReport> report_from_json(const nlohmann::json& j);
// Writes DIR/conformance.json and DIR/conformance.md; false with `error` set otherwise.
bool write_report_files(const CheckReport& report, const std::string& dir, std::string& error);

// One report from shard reports: per (backend, property) counts summed, mixes
// and decline reasons added, distinct failures joined, verdicts recomputed
// (failed over passed, xfail / XPASS kept from the lists).
Expected<CheckReport> merge_reports(const std::vector<CheckReport>& shards);

}  // namespace attn_oracle::harness
