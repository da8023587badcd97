// coverage_targets.cpp: see coverage_targets.hpp. Tested by tests/check_command_test.cpp.
#include "attn_oracle/harness/coverage_targets.hpp"

#include <fstream>
#include <sstream>

namespace attn_oracle::inline harness {
namespace {

bool matches(const CoverageTargets::Target& t, const CheckResult& r) {
  return r.id().rfind(t.prefix, 0) == 0 || r.outcome.property.rfind(t.prefix, 0) == 0;
}

int judged(const PropertyOutcome& o, const std::string& cls) {
  const auto it = o.classes.find(cls);
  return it == o.classes.end() ? 0 : it->second.first - it->second.second;
}

}  // namespace

std::optional<CoverageTargets> CoverageTargets::read(const std::string& path, std::string& error) {
  std::ifstream in(path);
  if (!in) return error = "cannot read " + path, std::nullopt;
  CoverageTargets out;
  out.path_ = path;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const size_t hash = text.find('#');
    std::istringstream words(text.substr(0, hash));
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    Target t;
    t.line = line;
    if (hash != std::string::npos) std::getline(std::istringstream(text.substr(hash + 1)) >> std::ws, t.reason);
    const bool numbered = w.size() >= 4 && w[w.size() - 2] == ">=" &&
                          w.back().find_first_not_of("0123456789") == std::string::npos && w.back().size() < 9;
    if (!numbered)
      return error = path + ":" + std::to_string(line) + ": expected `PROPERTY CLASS >= N [# reason]`, found \"" +
                     text + "\"",
             std::nullopt;
    t.prefix = w.front();
    t.at_least = std::stoi(w.back());
    for (size_t i = 1; i + 2 < w.size(); ++i) t.cls += (i > 1 ? " " : "") + w[i];
    out.targets_.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> CoverageTargets::unmet(const CheckResult& r) const {
  std::vector<std::string> out;
  for (const Target& t : targets_) {
    if (!matches(t, r)) continue;
    const int n = judged(r.outcome, t.cls);
    if (n < t.at_least)
      out.push_back(t.cls + ": " + std::to_string(n) + " judged draws, the target is " + std::to_string(t.at_least) +
                    " (" + path_ + ":" + std::to_string(t.line) + (t.reason.empty() ? "" : ": " + t.reason) + ")");
  }
  return out;
}

void CoverageTargets::apply(CheckResult& r) const {
  if (r.verdict == Verdict::skipped) return;
  const std::vector<std::string> missed = unmet(r);
  if (missed.empty()) return;
  std::string note = "coverage target not met: ";
  for (size_t i = 0; i < missed.size(); ++i) note += (i ? "; " : "") + missed[i];
  r.note = r.note.empty() ? note : r.note + "; " + note;
  if (!fails_the_run(r.verdict)) r.verdict = Verdict::failed;
}

std::vector<std::string> CoverageTargets::unmatched_warnings(const std::vector<CheckResult>& results) const {
  std::vector<std::string> out;
  for (const Target& t : targets_) {
    bool any = false;
    for (const CheckResult& r : results) any = any || matches(t, r);
    if (!any) out.push_back(path_ + ":" + std::to_string(t.line) + ": " + t.prefix + " matches no test");
  }
  return out;
}

}  // namespace attn_oracle::harness
