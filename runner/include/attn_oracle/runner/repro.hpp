// repro.hpp: from a counterexample to what a standalone reproduction needs
// (`attn-oracle repro`, `python -m attn_oracle repro`; docs/case-files.md,
// "From a failure to a report").
//
//  - find_disagreement: the one call of the backend that answers differently
//    from the float64 reference. A counterexample records the property that
//    failed; a metamorphic one (a permutation, added padding, repeated heads)
//    calls the backend on transformed problems, and the reproduction is the
//    call that is wrong on its own, not the relation between calls.
//  - failure_lines: a failure as printed, its case in one to three lines
//    (cases/case_summary.hpp).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_summary.hpp"  // case_summary, which failure_lines prints

namespace attn_oracle::inline runner {

struct Disagreement {
  Case direct;                     // the call as a case without a property record or `expected`
  std::vector<std::string> lines;  // how the backend differs: the first differing field first
  bool transformed = false;        // the property's check built `direct` from the counterexample
};

// Why there is nothing to reproduce: the backend does not take the case
// (seam/backend_takes.hpp; `repro` says SKIP and exits 4, as `replay` does), or
// every call agrees with the reference (a nondeterministic backend, a relation
// that no single call breaks, a crash; exit 3), naming what the check said.
struct NoDisagreement {
  bool declined = false;
  std::string why;
};

// The first call the case's property check makes (a case without a property
// record: the case itself) whose answer differs from the reference's.
std::variant<Disagreement, NoDisagreement> find_disagreement(Backend& backend, const Case& c);


struct PropertyFailure;
// What a shown failure prints, line by line: its message, where its case is
// (and how it was found), the case in one to three lines, and the replay, repro
// and rerun commands. The check's output, ctest's and the pytest plugin's.
std::vector<std::string> failure_lines(const PropertyFailure& f);

}  // namespace attn_oracle::runner
