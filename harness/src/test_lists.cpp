// test_lists.cpp: reading and matching skip and expected-failure lists
// (test_lists.hpp). Tested by tests/check_command_test.cpp.
#include "attn_oracle/harness/test_lists.hpp"
#include "attn_oracle/seam/backend.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace attn_oracle::inline harness {
namespace {

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

bool entry_matches(const TestIdList::Entry& e, const std::string& backend, const std::string& property) {
  return (backend + "/" + property).rfind(e.prefix, 0) == 0 || property.rfind(e.prefix, 0) == 0;
}

}  // namespace

std::optional<TestIdList> TestIdList::read(const std::string& path, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return std::nullopt;
  }
  TestIdList list;
  list.path_ = path;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const size_t hash = text.find('#');
    Entry e;
    e.line = line;
    e.reason = hash == std::string::npos ? "" : trimmed(text.substr(hash + 1));
    std::istringstream words(text.substr(0, hash));
    if (!(words >> e.prefix)) continue;
    for (std::string word; words >> word;) {
      if (word.starts_with("version=") && word.size() > 8) {
        e.version = word.substr(8);
      } else if (word.starts_with("arch=") && word.size() > 5) {
        std::istringstream archs(word.substr(5));
        for (std::string a; std::getline(archs, a, ',');)
          if (!a.empty()) e.archs.push_back(a);
      } else {
        error = path + ":" + std::to_string(line) + ": expected `PREFIX [version=V] [arch=A[,B...]] [# reason]`, found \"" +
                trimmed(text) + "\"";
        return std::nullopt;
      }
    }
    list.entries_.push_back(std::move(e));
  }
  return list;
}

std::string run_arch(const Backend& backend, const std::string& forced) {
  return forced.empty() ? backend.arch() : forced;
}

const TestIdList::Entry* TestIdList::match(const std::string& backend, const std::string& backend_version,
                                           const std::string& property, const std::string& arch) const {
  for (const Entry& e : entries_)
    if (entry_matches(e, backend, property) && backend_version.find(e.version) != std::string::npos &&
        (e.archs.empty() || std::find(e.archs.begin(), e.archs.end(), arch) != e.archs.end()))
      return &e;
  return nullptr;
}

std::vector<std::string> TestIdList::unmatched_warnings(
    const std::vector<std::pair<std::string, std::string>>& ids) const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    bool any = false;
    for (const auto& [backend, property] : ids) any = any || entry_matches(e, backend, property);
    if (!any) out.push_back(path_ + ":" + std::to_string(e.line) + ": " + e.prefix + " matches no test");
  }
  return out;
}

std::string TestIdList::where(const Entry& e) const {
  return path_ + ":" + std::to_string(e.line) + (e.reason.empty() ? "" : ": " + e.reason);
}

}  // namespace attn_oracle::harness
