// test_lists.hpp: skip and expected-failure lists (array-api-tests' lesson): the
// files of `check --skips / --xfails` and of attn_oracle_add_conformance(...
// SKIPS file XFAILS file), for this repository's backends and for a vendor's.
//
// A test id is BACKEND/PROPERTY ("cpu/attention/matchesReference"). One entry a
// line; '#' starts the reason (a comment), blank lines are ignored:
//
//   cudnn/attention/matchesReference  version=9.19  # bottom-right window off by one (fixtures/...)
//   cuda/attention/matchesReference   arch=sm_90    # the wgmma path's rescale (issue 3)
//   metadata/rowsAreIndependent                     # our packing needs B = 1 (issue 12)
//
// The first word is a prefix of the test id, or of the property id alone (so a
// vendor lists its own properties without naming its backend). `version=V`
// limits the entry to backends whose version contains V; `arch=A[,B...]` to runs
// on those device architectures (the backend's arch(), a worker's hello `arch`,
// or ATTN_ORACLE_ARCH, which overrides both: run_arch). An expected failure
// still runs: when it fails the verdict is xfail, when it passes XPASS, which
// fails the run (strict), so a fixed bug cannot stay listed. A listed skip is
// not run. An entry that matches no test of the run is warned about.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline harness {

// The architecture a backend's tests run on: `forced` (ATTN_ORACLE_ARCH, Settings::arch)
// when set, else Backend::arch().
std::string run_arch(const Backend& backend, const std::string& forced);

class TestIdList {
 public:
  struct Entry {
    std::string prefix;
    std::string version;  // "": any backend version
    std::vector<std::string> archs;  // empty: any architecture
    std::string reason;
    int line = 0;
  };

  // nullopt, with `error` set, when the file cannot be read or an entry is malformed.
  static std::optional<TestIdList> read(const std::string& path, std::string& error);

  const std::string& path() const { return path_; }
  // The first entry matching backend/property at that backend version, or nullptr.
  const Entry* match(const std::string& backend, const std::string& backend_version, const std::string& property,
                     const std::string& arch = "") const;
  // "FILE:LINE: PREFIX matches no test" for every entry no (backend, property) of the run matches.
  std::vector<std::string> unmatched_warnings(const std::vector<std::pair<std::string, std::string>>& ids) const;
  // "FILE:LINE: REASON" (or "FILE:LINE" without a reason): where a verdict came from.
  std::string where(const Entry& e) const;

 private:
  std::string path_;
  std::vector<Entry> entries_;
};

}  // namespace attn_oracle::harness
