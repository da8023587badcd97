// check_report.hpp: what `attn-oracle check` found, and its two report files.
//
// report/conformance.json is for machines (schema attn-oracle.conformance/1),
// report/conformance.md for people. Both are a function of the results alone:
// no dates, no durations (those go to the console), so two runs with the same
// seed on the same machine give byte-identical files.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attn_oracle {

// passed / FAILED / gave up come from the property; skipped from a missing
// capability or the skips list; xfail / XPASS from the xfails list.
enum class Verdict { passed, failed, gave_up, skipped, xfail, xpass };
std::string_view to_string(Verdict verdict);
inline bool unexpected_failure(Verdict v) { return v == Verdict::failed || v == Verdict::gave_up; }

struct CheckResult {
  std::string property, backend;
  Verdict verdict = Verdict::passed;
  int cases = 0;
  std::optional<double> worst_ratio;  // max error / budget over the tolerance checks
  std::string message;                // failure, skip or xfail reason
  std::string counterexample, replay, rerun;
  std::string id() const { return backend + "/" + property; }
};

struct BackendInfo {
  std::string name, version;
  std::vector<std::string> capabilities;
};

struct CheckReport {
  bool interrupted = false;
  std::vector<std::pair<std::string, std::string>> versions;  // project, compiler, cuda, cudnn, device
  uint64_t seed = 0;
  int max_success = 0, max_size = 0;
  bool deep = false;
  std::string rc_params, filter, skips_file, xfails_file, failures_dir;
  std::vector<BackendInfo> backends;
  std::vector<std::string> warnings;
  std::vector<CheckResult> results;  // property-major, in registry order

  int count(Verdict v) const;
  int unexpected_failures() const;
};

// "0.42", "inf", or "-" when no tolerance check ran.
std::string format_ratio(const std::optional<double>& ratio);
// "passed 100 0.42", "skipped", "FAILED 3 inf": one table cell.
std::string table_cell(const CheckResult& r);

std::string report_json(const CheckReport& report);
std::string report_markdown(const CheckReport& report);
// Writes DIR/conformance.json and DIR/conformance.md; false with `error` set otherwise.
bool write_report_files(const CheckReport& report, const std::string& dir, std::string& error);

}  // namespace attn_oracle
