// repro.hpp: `repro`, a counterexample as a standalone GoogleTest file for a
// vendored C++ backend (docs/vendoring.md, "8. Report what you found").
//
// The file builds the disagreeing call's inputs inline (find_disagreement,
// repro.hpp of the properties), calls the backend through the seam it
// implements (attn_oracle/seam/backend.hpp, which links no oracle) and asserts the
// float64 reference's answer written out: integers and error codes exactly,
// floats within the tolerance rule's budget, computed when the file is written
// and explained in one comment. Linked with the backend's own sources, it fails
// as the counterexample did and passes once the backend is fixed.
//
//   repro [--backend NAME] CASE [--out FILE] [--direct FILE]
//
// --out: the test file (default: stdout). --direct: the disagreeing call as a
// case file with the reference's answer as `expected`, for a writer in another
// language (`python -m attn_oracle repro` reads it).
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/runner/repro.hpp"

namespace attn_oracle::inline harness {

// The GoogleTest source for `d`, found on `backend` from the counterexample at `case_path`.
std::string gtest_reproduction(const Disagreement& d, const Backend& backend, const std::string& case_path,
                               const std::string& property);

// `repro`'s arguments (cli.cpp parses them).
struct ReproOptions {
  std::string backend;      // "": the backend the case records
  std::string case_path;
  std::string out_path;     // "" or "-": stdout
  std::string direct_path;  // "": none
};
int repro_command(const ReproOptions& options);

}  // namespace attn_oracle::harness
