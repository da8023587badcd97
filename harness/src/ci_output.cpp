// ci_output.cpp: see ci_output.hpp. Tested by tests/ci_output_test.cpp.
#include "attn_oracle/harness/ci_output.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iomanip>
#include <map>
#include <sstream>

#include "attn_oracle/runner/repro.hpp"

namespace attn_oracle::inline harness {
namespace {

// Text as XML character data or an attribute value: the five entities, and the
// characters XML 1.0 cannot hold (control characters a worker's log may carry) as '?'.
std::string xml_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r' ? '?' : c;
    }
  }
  return out;
}

std::string seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << s;
  return out.str();
}

// A result's one-line reason: the first failure's message, else the outcome's.
std::string headline(const CheckResult& r) {
  const PropertyOutcome& o = r.outcome;
  if (!o.failures.empty()) return o.failures.front().message;
  if (!o.failure_summary.empty()) return o.failure_summary;
  if (!o.message.empty()) return o.message;
  return r.note;
}

// Every distinct failure as printed by `check` (its message, case, replay and repro lines).
std::string failure_body(const CheckResult& r) {
  std::string body;
  if (!r.note.empty()) body += r.note + "\n";
  for (const TriageEntry& e : triage_entries(r.outcome)) {
    if (!e.heading.empty()) body += e.heading + (e.failure ? "" : ": " + e.example) + "\n";
    if (e.failure)
      for (const std::string& line : failure_lines(*e.failure)) body += "  " + line + "\n";
  }
  return body;
}

std::string draws_line(const PropertyOutcome& o) {
  return std::to_string(o.passed) + " passed, " + std::to_string(o.declined) + " declined, " +
         std::to_string(o.failed) + " failed of " + std::to_string(o.drawn) + " draws; worst error/budget " +
         format_ratio(o.worst_ratio);
}

void write_testcase(std::ostream& out, const CheckResult& r) {
  const PropertyOutcome& o = r.outcome;
  out << "    <testcase classname=\"attn-oracle." << xml_text(o.backend) << "\" name=\"" << xml_text(o.property)
      << "\" time=\"" << seconds(o.seconds) << "\">\n";
  switch (r.verdict) {
    case Verdict::failed:
    case Verdict::xpass:
      out << "      <failure type=\"" << to_string(r.verdict) << "\" message=\"" << xml_text(headline(r)) << "\">"
          << xml_text(failure_body(r)) << "</failure>\n";
      break;
    case Verdict::skipped:
    case Verdict::xfail:
      out << "      <skipped message=\"" << xml_text(r.verdict == Verdict::xfail ? r.note : headline(r)) << "\"/>\n";
      break;
    case Verdict::passed: break;
  }
  out << "      <system-out>" << xml_text(draws_line(o)) << "</system-out>\n    </testcase>\n";
}

// GitHub's escaping of a workflow command's message, and of a property value (also ':' and ',').
std::string command_data(const std::string& text, bool property) {
  std::string out;
  for (const char c : text) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else if (property && c == ':') out += "%3A";
    else if (property && c == ',') out += "%2C";
    else out += c;
  }
  return out;
}

std::string relative(const std::string& path, const std::string& base) {
  if (base.empty() || path.empty()) return path;
  const std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  const std::filesystem::path rel = p.lexically_relative(std::filesystem::absolute(base).lexically_normal());
  return rel.empty() || *rel.begin() == ".." ? path : rel.string();
}

}  // namespace

std::string junit_xml(const CheckReport& report) {
  std::map<std::string, std::vector<const CheckResult*>> by_backend;
  for (const CheckResult& r : report.results) by_backend[r.outcome.backend].push_back(&r);
  const auto count = [](const std::vector<const CheckResult*>& rs, auto pick) {
    int n = 0;
    for (const CheckResult* r : rs) n += pick(r->verdict) ? 1 : 0;
    return n;
  };
  const auto failing = [](Verdict v) { return fails_the_run(v); };
  const auto skipped = [](Verdict v) { return v == Verdict::skipped || v == Verdict::xfail; };
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attn-oracle\" tests=\""
      << report.results.size() << "\" failures=\"" << report.failures() << "\">\n";
  for (const BackendInfo& b : report.backends) {
    const std::vector<const CheckResult*>& rs = by_backend[b.name];
    double total = 0.0;
    for (const CheckResult* r : rs) total += r->outcome.seconds;
    out << "  <testsuite name=\"" << xml_text(b.name) << "\" tests=\"" << rs.size() << "\" failures=\""
        << count(rs, failing) << "\" errors=\"0\" skipped=\"" << count(rs, skipped) << "\" time=\"" << seconds(total)
        << "\">\n    <properties>\n";
    const std::vector<std::pair<std::string, std::string>> props = {
        {"backend version", b.version}, {"domain", b.domain}, {"seed", std::to_string(report.seed)},
        {"cases", std::to_string(report.cases)}, {"profile", report.profile}};
    for (const auto& [k, v] : props)
      out << "      <property name=\"" << xml_text(k) << "\" value=\"" << xml_text(v) << "\"/>\n";
    out << "    </properties>\n";
    for (const CheckResult* r : rs) write_testcase(out, *r);
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return out.str();
}

std::vector<std::string> github_annotations(const CheckReport& report, const std::string& relative_to) {
  std::vector<std::string> lines;
  for (const std::string& w : report.warnings) lines.push_back("::warning title=attn-oracle::" + command_data(w, false));
  for (const CheckResult& r : report.results) {
    if (!fails_the_run(r.verdict)) continue;
    const std::string title = r.id() + (r.verdict == Verdict::xpass ? " (XPASS)" : "");
    if (r.outcome.failures.empty()) {
      lines.push_back("::error title=" + command_data(title, true) + "::" + command_data(headline(r), false));
      continue;
    }
    for (const PropertyFailure& f : r.outcome.failures) {
      std::string message = f.message;
      if (!f.replay_command.empty()) message += "\nreplay: " + f.replay_command;
      if (!f.repro_command.empty()) message += "\nrepro: " + f.repro_command;
      const std::string file = relative(f.case_path, relative_to);
      lines.push_back("::error " + (file.empty() ? "" : "file=" + command_data(file, true) + ",") +
                      "title=" + command_data(title, true) + "::" + command_data(message, false));
    }
  }
  return lines;
}

// --junit-xml and --github-annotations (ci_output.hpp); `error` set when the file cannot be written.
bool write_ci_output(const CheckReport& report, const CheckOptions& options, std::string& error) {
  if (!options.junit_xml.empty()) {
    std::ofstream out(options.junit_xml);
    if (!(out << junit_xml(report))) {
      error = "cannot write " + options.junit_xml;
      std::cerr << "attn-oracle check: " << error << "\n";
    } else {
      std::cout << "junit: " << options.junit_xml << "\n";
    }
  }
  if (options.github_annotations)
    for (const std::string& line : github_annotations(report, std::filesystem::current_path().string()))
      std::cout << line << "\n";
  return error.empty();
}


}  // namespace attn_oracle::harness
