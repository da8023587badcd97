// test_id_list.cpp: reading and matching the --skips / --xfails files.
#include "test_id_list.hpp"

#include <fstream>

namespace attn_oracle {
namespace {

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
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
    const std::string prefix = trimmed(text.substr(0, text.find('#')));
    if (!prefix.empty()) list.entries_.push_back({prefix, line});
  }
  return list;
}

const TestIdList::Entry* TestIdList::match(const std::string& id) const {
  for (const Entry& e : entries_)
    if (id.rfind(e.prefix, 0) == 0) return &e;
  return nullptr;
}

std::vector<std::string> TestIdList::unmatched_warnings(const std::vector<std::string>& ids) const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    bool any = false;
    for (const std::string& id : ids) any = any || id.rfind(e.prefix, 0) == 0;
    if (!any) out.push_back(path_ + ":" + std::to_string(e.line) + ": " + e.prefix + " matches no test");
  }
  return out;
}

}  // namespace attn_oracle
