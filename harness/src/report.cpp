// check_report.cpp: the JSON and Markdown forms of a CheckReport.
#include "check_report.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace attn_oracle {
namespace {

using ojson = nlohmann::ordered_json;

ojson ratio_json(const std::optional<double>& ratio) {
  if (!ratio) return nullptr;
  if (!std::isfinite(*ratio)) return format_ratio(ratio);  // JSON has no infinity
  return *ratio;
}

ojson result_json(const CheckResult& r) {
  ojson j;
  j["id"] = r.id();
  j["property"] = r.property;
  j["backend"] = r.backend;
  j["status"] = std::string(to_string(r.verdict));
  j["cases"] = r.cases;
  j["worst_error_to_budget"] = ratio_json(r.worst_ratio);
  if (!r.message.empty()) j["message"] = r.message;
  if (!r.counterexample.empty()) j["counterexample"] = r.counterexample;
  if (!r.replay.empty()) j["replay"] = r.replay;
  if (!r.rerun.empty()) j["rerun"] = r.rerun;
  return j;
}

// Property ids in first-seen order: the rows of the table.
std::vector<std::string> property_rows(const CheckReport& report) {
  std::vector<std::string> rows;
  for (const CheckResult& r : report.results)
    if (rows.empty() || rows.back() != r.property) rows.push_back(r.property);
  return rows;
}

const CheckResult* find_result(const CheckReport& report, const std::string& property,
                               const std::string& backend) {
  for (const CheckResult& r : report.results)
    if (r.property == property && r.backend == backend) return &r;
  return nullptr;
}

void markdown_table(const CheckReport& report, std::ostream& os) {
  os << "| property |";
  for (const BackendInfo& b : report.backends) os << " " << b.name << " |";
  os << "\n|---|";
  for (size_t i = 0; i < report.backends.size(); ++i) os << "---|";
  os << "\n";
  for (const std::string& property : property_rows(report)) {
    os << "| `" << property << "` |";
    for (const BackendInfo& b : report.backends) {
      const CheckResult* r = find_result(report, property, b.name);
      os << " " << (r ? table_cell(*r) : "not run") << " |";
    }
    os << "\n";
  }
}

void markdown_details(const CheckReport& report, std::ostream& os) {
  bool header = false;
  for (const CheckResult& r : report.results) {
    if (r.verdict == Verdict::passed || r.verdict == Verdict::skipped) continue;
    if (!header) os << "\n## Failures, expected failures and unexpected passes\n";
    header = true;
    os << "\n### `" << r.id() << "`: " << to_string(r.verdict) << "\n\n";
    if (!r.message.empty()) os << "```\n" << r.message << (r.message.back() == '\n' ? "" : "\n") << "```\n\n";
    if (!r.counterexample.empty()) os << "- counterexample: `" << r.counterexample << "`\n";
    if (!r.replay.empty()) os << "- replay: `" << r.replay << "`\n";
    if (!r.rerun.empty()) os << "- rerun: `" << r.rerun << " attn-oracle check --backend " << r.backend
                             << " --filter " << r.property << "`\n";
  }
  header = false;
  for (const CheckResult& r : report.results) {
    if (r.verdict != Verdict::skipped) continue;
    if (!header) os << "\n## Skipped\n\n";
    header = true;
    os << "- `" << r.id() << "`: " << r.message << "\n";
  }
}

}  // namespace

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::passed: return "passed";
    case Verdict::failed: return "FAILED";
    case Verdict::gave_up: return "gave up";
    case Verdict::skipped: return "skipped";
    case Verdict::xfail: return "xfail";
    case Verdict::xpass: return "XPASS";
  }
  return "?";
}

int CheckReport::count(Verdict v) const {
  int n = 0;
  for (const CheckResult& r : results) n += r.verdict == v;
  return n;
}

int CheckReport::unexpected_failures() const { return count(Verdict::failed) + count(Verdict::gave_up); }

std::string format_ratio(const std::optional<double>& ratio) {
  if (!ratio) return "-";
  if (std::isnan(*ratio)) return "nan";
  if (std::isinf(*ratio)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", *ratio);
  return buf;
}

std::string table_cell(const CheckResult& r) {
  if (r.verdict == Verdict::skipped) return "skipped";
  return std::string(to_string(r.verdict)) + " " + std::to_string(r.cases) + " " + format_ratio(r.worst_ratio);
}

std::string report_json(const CheckReport& report) {
  ojson j;
  j["schema"] = "attn-oracle.conformance/1";
  j["interrupted"] = report.interrupted;
  ojson versions = ojson::object();
  for (const auto& [k, v] : report.versions) versions[k] = v;
  j["versions"] = versions;
  j["settings"] = {{"seed", report.seed},           {"max_success", report.max_success},
                   {"max_size", report.max_size},   {"deep", report.deep},
                   {"rc_params", report.rc_params}, {"filter", report.filter},
                   {"skips", report.skips_file},    {"xfails", report.xfails_file},
                   {"failures_dir", report.failures_dir}};
  j["backends"] = ojson::array();
  for (const BackendInfo& b : report.backends)
    j["backends"].push_back({{"name", b.name}, {"version", b.version}, {"capabilities", b.capabilities}});
  j["warnings"] = report.warnings;
  ojson summary;
  for (Verdict v : {Verdict::passed, Verdict::failed, Verdict::gave_up, Verdict::skipped, Verdict::xfail, Verdict::xpass})
    summary[std::string(to_string(v))] = report.count(v);
  j["summary"] = summary;
  j["results"] = ojson::array();
  for (const CheckResult& r : report.results) j["results"].push_back(result_json(r));
  return j.dump(2) + "\n";
}

std::string report_markdown(const CheckReport& report) {
  std::ostringstream os;
  os << "# attn-oracle conformance report\n\n";
  if (report.interrupted) os << "**Interrupted**: the run was stopped early; the results below are partial.\n\n";
  os << report.count(Verdict::passed) << " passed, " << report.unexpected_failures() << " failed, "
     << report.count(Verdict::skipped) << " skipped, " << report.count(Verdict::xfail) << " expected failures, "
     << report.count(Verdict::xpass) << " unexpected passes.\n\n";
  os << "| | |\n|---|---|\n";
  for (const auto& [k, v] : report.versions) os << "| " << k << " | " << v << " |\n";
  os << "| seed | " << report.seed << " |\n| cases per property | " << report.max_success
     << " |\n| max_size | " << report.max_size << " |\n| deep | " << (report.deep ? "yes" : "no")
     << " |\n| RC_PARAMS | " << (report.rc_params.empty() ? "unset" : "`" + report.rc_params + "`") << " |\n";
  if (!report.filter.empty()) os << "| filter | `" << report.filter << "` |\n";
  if (!report.skips_file.empty()) os << "| skips | `" << report.skips_file << "` |\n";
  if (!report.xfails_file.empty()) os << "| xfails | `" << report.xfails_file << "` |\n";
  os << "\nBackends:\n\n";
  for (const BackendInfo& b : report.backends) {
    os << "- `" << b.name << "` (" << b.version << "):";
    for (const std::string& c : b.capabilities) os << " " << c;
    os << "\n";
  }
  os << "\n## Results\n\nEach cell: verdict, cases run, worst error / tolerance budget over the float "
        "checks (`-` for exact properties; above 1 fails).\n\n";
  markdown_table(report, os);
  markdown_details(report, os);
  if (!report.warnings.empty()) {
    os << "\n## Warnings\n\n";
    for (const std::string& w : report.warnings) os << "- " << w << "\n";
  }
  return os.str();
}

bool write_report_files(const CheckReport& report, const std::string& dir, std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::pair<std::string, std::string> files[] = {{"conformance.json", report_json(report)},
                                                        {"conformance.md", report_markdown(report)}};
  for (const auto& [name, text] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary);
    if (!(out << text)) return error = "cannot write " + path, false;
  }
  return true;
}

}  // namespace attn_oracle
