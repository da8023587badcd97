// report.cpp: the JSON and Markdown forms of a CheckReport, reading one back,
// and merging shard reports (report.hpp). Tested by tests/check_command_test.cpp.
#include "attn_oracle/harness/report.hpp"

#include "attn_oracle/harness/test_lists.hpp"
#include "attn_oracle/runner/repro.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace attn_oracle::inline harness {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

}  // namespace

namespace {

ojson result_json(const CheckResult& r) {
  ojson j;
  j["id"] = r.id();
  j["verdict"] = std::string(to_string(r.verdict));
  if (!r.note.empty()) j["note"] = r.note;
  const ojson outcome = outcome_to_json(r.outcome);
  for (auto it = outcome.begin(); it != outcome.end(); ++it) j[it.key()] = it.value();
  return j;
}

Verdict verdict_from(const std::string& s) {
  for (Verdict v : {Verdict::passed, Verdict::failed, Verdict::skipped, Verdict::xfail, Verdict::xpass})
    if (s == to_string(v)) return v;
  return Verdict::failed;
}

// Property ids in first-seen order: the rows of the table.
std::vector<std::string> property_rows(const CheckReport& report) {
  std::vector<std::string> rows;
  for (const CheckResult& r : report.results)
    if (std::find(rows.begin(), rows.end(), r.outcome.property) == rows.end()) rows.push_back(r.outcome.property);
  return rows;
}

const CheckResult* find_result(const CheckReport& report, const std::string& property, const std::string& backend) {
  for (const CheckResult& r : report.results)
    if (r.outcome.property == property && r.outcome.backend == backend) return &r;
  return nullptr;
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

void markdown_table(const CheckReport& report, std::ostream& os) {
  os << "\n## Results\n\nEach cell: verdict, draws passed, worst error / tolerance budget.\n\n| property |";
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

// The mix a property drew: "mask causal 12, mask padding 30, ...".
std::string mix_line(const std::map<std::string, int>& mix, const std::string& kind) {
  std::vector<std::string> parts;
  for (const auto& [k, n] : mix)
    if (k.rfind(kind + " ", 0) == 0) parts.push_back(k.substr(kind.size() + 1) + " " + std::to_string(n));
  return joined(parts, ", ");
}

void markdown_property(const CheckResult& r, std::ostream& os) {
  const PropertyOutcome& o = r.outcome;
  os << "\n### `" << r.id() << "`: " << verdict_text(r) << "\n\n";
  if (!r.note.empty()) os << "- " << r.note << "\n";
  if (!o.message.empty()) os << "- " << o.message << "\n";
  os << "- draws: " << o.drawn << " (judged " << o.judged() << ": passed " << o.passed << ", failed " << o.failed
     << "; declined " << o.declined << "), seed " << o.seed << ", " << seconds(o.seconds) << ", worst error / budget " << format_ratio(o.worst_ratio)
     << "\n";
  os << "- backend version: " << o.backend_version << "\n";
  if (!o.not_compared.empty()) os << "- **" << not_compared_line(o) << "**\n";
  for (const std::string& line : wholly_declined_classes(o)) os << "- **" << line << "**\n";
  for (const std::string& line : store_lines(o.store)) os << "- store: " << line << "\n";
  for (const auto& [reason, n] : o.decline_reasons) os << "- declined " << n << "x: " << o.decline_example(reason) << "\n";
  for (const char* kind : {"op", "mask", "dtype", "layout", "label"})
    if (auto line = mix_line(o.mix, kind); !line.empty()) os << "- drawn " << kind << ": " << line << "\n";
  if (o.drawn > 0)
    os << "- largest draw: " << o.largest.rows << " rows, " << o.largest.tokens << " tokens, " << o.largest.devices
       << " devices\n";
  if (!o.failure_summary.empty()) os << "- **FAILED: " << o.failure_summary << "**\n";
  if (const std::string cost = triage_cost_line(o); !cost.empty()) os << "- " << cost << "\n";
  for (const TriageEntry& e : triage_entries(o)) {
    if (!e.heading.empty()) os << "\n**" << e.heading << "**" << (e.failure ? "" : ": `" + e.example + "`") << "\n";
    if (const PropertyFailure* f = e.failure) {
      os << "\n```\n" << f->message << "\n```\n\n";
      os << "- counterexample (" << counterexample_origin(*f) << "): `" << f->case_path << "`\n";
      for (const std::string& line : case_summary_lines(f->case_path)) os << "- case: " << line << "\n";
      os << "- replay: `" << f->replay_command << "`\n- reproduce without attn-oracle: `" << f->repro_command
         << "`\n- rerun: `" << f->rerun_command << "`\n";
      if (!f->backend_log.empty()) os << "- the worker's stderr ended with:\n\n```\n" << f->backend_log << (f->backend_log.ends_with('\n') ? "" : "\n") << "```\n";
    }
    if (!e.decline.empty()) os << "\n- `" << e.decline << "`\n";
  }
}


// A merged outcome's status and verdict from its counts and the list note it carries.
void settle(CheckResult& r) {
  PropertyOutcome& o = r.outcome;
  if (!o.failures.empty()) o.status = PropertyOutcome::Status::failed;
  else if (o.passed > 0) o.status = PropertyOutcome::Status::passed;
  else if (o.drawn > 0 || !o.message.empty()) o.status = PropertyOutcome::Status::skipped;
  if (o.status != PropertyOutcome::Status::skipped) o.message.clear();
  const bool expected_failure = r.verdict == Verdict::xfail || r.verdict == Verdict::xpass;
  if (r.verdict == Verdict::skipped && o.drawn == 0) return;  // a listed skip
  switch (o.status) {
    case PropertyOutcome::Status::failed: r.verdict = expected_failure ? Verdict::xfail : Verdict::failed; break;
    case PropertyOutcome::Status::passed: r.verdict = expected_failure ? Verdict::xpass : Verdict::passed; break;
    case PropertyOutcome::Status::skipped: r.verdict = Verdict::skipped; break;
  }
}

}  // namespace

namespace {

std::string compiler_version() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

std::vector<std::pair<std::string, std::string>> suite_versions() {
  return {{"attn-oracle", ATTN_ORACLE_VERSION}, {"commit", ATTN_ORACLE_COMMIT}, {"compiler", compiler_version()}};
}

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::passed: return "passed";
    case Verdict::failed: return "FAILED";
    case Verdict::skipped: return "skipped";
    case Verdict::xfail: return "xfail";
    case Verdict::xpass: return "XPASS";
  }
  return "?";
}

CheckResult verdict_of(PropertyOutcome outcome, const TestIdList* xfails, const std::string& arch) {
  CheckResult r{std::move(outcome), Verdict::passed, ""};
  const PropertyOutcome& o = r.outcome;
  r.verdict = o.status == PropertyOutcome::Status::failed    ? Verdict::failed
              : o.status == PropertyOutcome::Status::skipped ? Verdict::skipped
                                                             : Verdict::passed;
  const TestIdList::Entry* e = xfails ? xfails->match(o.backend, o.backend_version, o.property, arch) : nullptr;
  if (!e || r.verdict == Verdict::skipped) return r;
  r.verdict = r.verdict == Verdict::failed ? Verdict::xfail : Verdict::xpass;
  r.note = r.verdict == Verdict::xfail ? "expected failure (" + xfails->where(*e) + ")"
                                       : "listed as an expected failure (" + xfails->where(*e) +
                                             ") but passed: remove it from the list once the bug is fixed";
  return r;
}

CheckResult listed_skip(const std::string& property, const Backend& backend, const TestIdList& skips,
                        const std::string& arch) {
  CheckResult r;
  r.outcome.property = property;
  r.outcome.backend = backend.name();
  r.outcome.backend_version = backend.version();
  r.outcome.status = PropertyOutcome::Status::skipped;
  r.verdict = Verdict::skipped;
  const TestIdList::Entry* e = skips.match(backend.name(), backend.version(), property, arch);
  r.note = "listed in " + (e ? skips.where(*e) : skips.path());
  return r;
}

int CheckReport::count(Verdict v) const {
  int n = 0;
  for (const CheckResult& r : results) n += r.verdict == v;
  return n;
}

int CheckReport::failures() const { return count(Verdict::failed) + count(Verdict::xpass); }

std::string worker_starts_line(const WorkerStarts& starts) {
  std::string line = "worker starts: " + std::to_string(starts.total);
  if (starts.restarts > 0)
    line += " (" + std::to_string(starts.restarts) + (starts.restarts == 1 ? " restart" : " restarts") +
            " after a crash, a hang or a protocol error)";
  return line;
}

std::string format_ratio(const std::optional<double>& ratio) {
  if (!ratio) return "-";
  if (std::isnan(*ratio)) return "nan";
  if (std::isinf(*ratio)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", *ratio);
  return buf;
}

std::string verdict_text(const CheckResult& r) {
  const std::string thin = r.verdict == Verdict::passed ? thin_judgement(r.outcome) : "";
  return thin.empty() ? std::string(to_string(r.verdict)) : "passed, but " + thin;
}

std::string table_cell(const CheckResult& r) {
  if (r.verdict == Verdict::skipped) return "skipped";
  return verdict_text(r) + " " + std::to_string(r.outcome.passed) + " " +
         format_ratio(r.outcome.worst_ratio);
}

std::vector<DrawCost> draw_costs(const CheckReport& report) {
  std::vector<DrawCost> out;
  for (const BackendInfo& b : report.backends) {
    DrawCost c{b.name};
    for (const CheckResult& r : report.results)
      if (r.outcome.backend == b.name) {
        c.draws += r.outcome.drawn;
        c.seconds += r.outcome.draw_seconds;
        c.backend_seconds += r.outcome.backend_seconds;
      }
    if (c.draws > 0) out.push_back(c);
  }
  return out;
}

std::string draw_cost_line(const DrawCost& c) {
  const double draws = std::max(c.draws, 1);
  char text[256];
  std::snprintf(text, sizeof text,
                "cost per draw on %s: %.2f ms (the suite's generation, float64 oracle and checks %.2f ms, the backend "
                "%.2f ms) over %d draws, %.1f draws/s",
                c.backend.c_str(), 1e3 * c.seconds / draws, 1e3 * c.suite_seconds() / draws,
                1e3 * c.backend_seconds / draws, c.draws, c.seconds > 0 ? c.draws / c.seconds : 0.0);
  return text;
}

std::string report_json(const CheckReport& report) {
  ojson j;
  j["schema"] = "attn-oracle.conformance/2";
  j["interrupted"] = report.interrupted;
  ojson versions = ojson::object();
  for (const auto& [k, v] : report.versions) versions[k] = v;
  j["versions"] = versions;
  j["settings"] = {{"seed", report.seed},          {"cases", report.cases},         {"max_size", report.max_size},
                   {"profile", report.profile},
                   {"max_failures", report.max_failures}, {"shards", report.shards}, {"filter", report.filter},
                   {"skips", report.skips_file},   {"xfails", report.xfails_file},  {"failures_dir", report.failures_dir},
                   {"store", report.store}};
  j["backends"] = ojson::array();
  for (const BackendInfo& b : report.backends) {
    ojson backend = {{"name", b.name}, {"version", b.version}, {"capabilities", b.capabilities}, {"domain", b.domain}};
    if (b.worker_starts) backend["worker_starts"] = {{"total", b.worker_starts->total}, {"restarts", b.worker_starts->restarts}};
    j["backends"].push_back(std::move(backend));
  }
  j["warnings"] = report.warnings;
  ojson summary;
  for (Verdict v : {Verdict::passed, Verdict::failed, Verdict::skipped, Verdict::xfail, Verdict::xpass})
    summary[std::string(to_string(v))] = report.count(v);
  j["summary"] = summary;
  j["cost_per_draw"] = ojson::array();
  for (const DrawCost& c : draw_costs(report)) {
    const double draws = std::max(c.draws, 1);
    j["cost_per_draw"].push_back({{"backend", c.backend}, {"draws", c.draws},
                                  {"seconds", std::round(c.seconds * 1000.0) / 1000.0},
                                  {"suite_ms", std::round(c.suite_seconds() / draws * 1e5) / 100.0},
                                  {"backend_ms", std::round(c.backend_seconds / draws * 1e5) / 100.0}});
  }
  j["results"] = ojson::array();
  for (const CheckResult& r : report.results) j["results"].push_back(result_json(r));
  return j.dump(2) + "\n";
}

Expected<CheckReport> report_from_json(const json& j) {
  if (!j.is_object() || j.value("schema", "") != "attn-oracle.conformance/2")
    return Error{ErrorCode::bad_case, "not an attn-oracle.conformance/2 report"};
  try {
    CheckReport r;
    r.interrupted = j.value("interrupted", false);
    const json versions = j.value("versions", json::object());
    for (auto it = versions.begin(); it != versions.end(); ++it) r.versions.emplace_back(it.key(), it.value().get<std::string>());
    const json s = j.value("settings", json::object());
    r.seed = s.value("seed", uint64_t{0});
    r.cases = s.value("cases", 0), r.max_size = s.value("max_size", 0), r.max_failures = s.value("max_failures", 0);
    r.profile = s.value("profile", "ci");
    r.shards = s.value("shards", std::vector<std::string>{});
    r.filter = s.value("filter", ""), r.skips_file = s.value("skips", ""), r.xfails_file = s.value("xfails", "");
    r.failures_dir = s.value("failures_dir", "");
    r.store = s.value("store", false);
    for (const json& b : j.value("backends", json::array())) {
      r.backends.push_back({b.value("name", ""), b.value("version", ""), b.value("capabilities", std::vector<std::string>{}),
                            b.value("domain", std::string("every input")), std::nullopt});
      if (b.contains("worker_starts"))
        r.backends.back().worker_starts = WorkerStarts{b["worker_starts"].value("total", 0), b["worker_starts"].value("restarts", 0)};
    }
    r.warnings = j.value("warnings", std::vector<std::string>{});
    for (const json& x : j.value("results", json::array()))
      r.results.push_back(CheckResult{outcome_from_json(x), verdict_from(x.value("verdict", "FAILED")), x.value("note", "")});
    return r;
  } catch (const std::exception& e) {
    return Error{ErrorCode::bad_case, std::string("report: ") + e.what()};
  }
}

std::string report_markdown(const CheckReport& report) {
  std::ostringstream os;
  os << "# attn-oracle conformance report\n";
  if (report.interrupted) os << "\n**Interrupted**: the run stopped early; the results below are the properties that finished.\n";
  os << "\n## Versions\n\n";
  for (const auto& [k, v] : report.versions) os << "- " << k << ": " << v << "\n";
  for (const BackendInfo& b : report.backends)
    os << "- backend `" << b.name << "`: " << b.version << " (" << joined(b.capabilities, ", ") << "; domain: " << b.domain
       << (b.worker_starts ? "; " + worker_starts_line(*b.worker_starts) : "") << ")\n";
  os << "\n## Settings\n\n- seed " << report.seed << ", " << report.cases << " draws per property, max_size "
     << report.max_size << ", size profile " << report.profile << ", up to " << report.max_failures << " distinct failures per property\n";
  os << "- shards: " << joined(report.shards, ", ") << "\n";
  if (!report.filter.empty()) os << "- filter: `" << report.filter << "`\n";
  if (!report.skips_file.empty()) os << "- skips: `" << report.skips_file << "`\n";
  if (!report.xfails_file.empty()) os << "- expected failures: `" << report.xfails_file << "`\n";
  os << "- counterexamples: `" << report.failures_dir << "`" << (report.store ? " (a failure store: its saved failures run first)" : "") << "\n";
  for (const std::string& w : report.warnings) os << "- warning: " << w << "\n";
  os << "\n**" << report.count(Verdict::passed) << " passed, " << report.count(Verdict::failed) << " failed, "
     << report.count(Verdict::skipped) << " skipped, " << report.count(Verdict::xfail) << " expected failures, "
     << report.count(Verdict::xpass) << " unexpected passes**\n";
  markdown_table(report, os);
  os << "\n";
  for (const DrawCost& c : draw_costs(report)) os << "- " << draw_cost_line(c) << "\n";
  os << "\n## Properties\n";
  for (const CheckResult& r : report.results) markdown_property(r, os);
  return os.str();
}

bool write_report_files(const CheckReport& report, const std::string& dir, std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream json_out(std::filesystem::path(dir) / "conformance.json");
  std::ofstream md_out(std::filesystem::path(dir) / "conformance.md");
  if (!(json_out << report_json(report)) || !(md_out << report_markdown(report))) {
    error = "cannot write the report into " + dir;
    return false;
  }
  return true;
}

Expected<CheckReport> merge_reports(const std::vector<CheckReport>& shards) {
  if (shards.empty()) return Error{ErrorCode::bad_case, "no report to merge"};
  CheckReport merged = shards.front();
  merged.results.clear();
  merged.shards.clear();
  merged.warnings.clear();
  merged.backends.clear();
  for (const CheckReport& s : shards) {
    if (s.seed != merged.seed || s.cases != merged.cases || s.profile != merged.profile)
      return Error{ErrorCode::bad_case, "reports of different runs: seed " + std::to_string(s.seed) + ", " +
                                            std::to_string(s.cases) + " cases, profile " + s.profile + " against seed " + std::to_string(merged.seed) +
                                            ", " + std::to_string(merged.cases) + " cases, profile " + merged.profile};
    merged.interrupted = merged.interrupted || s.interrupted;
    merged.shards.insert(merged.shards.end(), s.shards.begin(), s.shards.end());
    for (const std::string& w : s.warnings)
      if (std::find(merged.warnings.begin(), merged.warnings.end(), w) == merged.warnings.end()) merged.warnings.push_back(w);
    for (const BackendInfo& b : s.backends) {
      auto it = std::find_if(merged.backends.begin(), merged.backends.end(), [&](const BackendInfo& x) { return x.name == b.name; });
      if (it == merged.backends.end()) {
        merged.backends.push_back(b);
      } else if (b.worker_starts) {  // each shard ran its own workers
        WorkerStarts& sum = it->worker_starts ? *it->worker_starts : it->worker_starts.emplace();
        sum.total += b.worker_starts->total, sum.restarts += b.worker_starts->restarts;
      }
    }
    for (const CheckResult& r : s.results) {
      auto it = std::find_if(merged.results.begin(), merged.results.end(),
                             [&](const CheckResult& x) { return x.id() == r.id(); });
      if (it == merged.results.end()) {
        merged.results.push_back(r);
        continue;
      }
      merge_outcome(it->outcome, r.outcome);
      if (it->note.empty()) it->note = r.note;
      if (r.verdict == Verdict::xfail || r.verdict == Verdict::xpass) it->verdict = r.verdict;
    }
  }
  for (CheckResult& r : merged.results) settle(r);
  std::sort(merged.shards.begin(), merged.shards.end());
  merged.shards.erase(std::unique(merged.shards.begin(), merged.shards.end()), merged.shards.end());
  return merged;
}

}  // namespace attn_oracle::harness
