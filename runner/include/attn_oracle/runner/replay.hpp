// replay.hpp: evaluating and judging one case, written once for every caller
// (`attn-oracle eval`, `replay` and `promote`, the fixture test, the planted-bug
// tests, the case-file fuzz target).
//
//  - evaluate_case: what the backend gives for the case (eval's JSON).
//  - judge_case: the backend against the float64 oracle (the op's judge).
//  - replay_case: a counterexample re-runs the property check it records
//    (case_file.hpp `property`), with the drawn values it records; a case
//    without one is judged as the backend against the oracle. Then, when the
//    case has `expected`, the reference is compared with it.
#pragma once

#include <string>

#include "attn_oracle/cases/case_op.hpp"

namespace attn_oracle::inline runner {

Evaluation evaluate_case(Backend& backend, const Case& c);
Judgement judge_case(Backend& backend, const Case& c);
// The reference's evaluation against c.expected: errors by code (and message for
// ops that pin it), numbers to the op's relative tolerance, integers exactly.
Judgement check_expected(const Case& c);
Judgement replay_case(Backend& backend, const Case& c);
// replay_case of a file. A file the reader rejects passes when its `expected`
// pins that error code; otherwise the reader's error is returned.
Expected<Judgement> replay_file(Backend& backend, const std::string& path);

// The case with the reference's evaluation as `expected` and `note` (a fixture).
Case promote_case(Case c, const std::string& note);

}  // namespace attn_oracle::runner
