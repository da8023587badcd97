// test_id_list.hpp: the --skips and --xfails files of `attn-oracle check`.
//
// A test id is BACKEND/PROPERTY ("cpu/attention/matchesReference", the id
// RapidCheck reproduces by). A list file holds one id prefix per line, so that
// "cuda/" names every property on cuda and "cpu/attention/" one area; '#' starts
// a comment, blank lines are ignored.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace attn_oracle {

class TestIdList {
 public:
  struct Entry {
    std::string prefix;
    int line = 0;
  };

  // nullopt, with `error` set, when the file cannot be read.
  static std::optional<TestIdList> read(const std::string& path, std::string& error);

  const std::string& path() const { return path_; }
  // The first entry that `id` starts with, or nullptr.
  const Entry* match(const std::string& id) const;
  // "FILE:LINE: PREFIX matches no test" for every entry no id in `ids` starts with.
  std::vector<std::string> unmatched_warnings(const std::vector<std::string>& ids) const;

 private:
  std::string path_;
  std::vector<Entry> entries_;
};

}  // namespace attn_oracle
