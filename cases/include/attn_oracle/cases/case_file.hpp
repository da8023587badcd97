// case_file.hpp: case files (docs/case-files.md), `attn-oracle.case/2`.
//
// A case is an envelope and one op's payload:
//   {"schema": "attn-oracle.case/2", "op": "<op>", "note": "...",
//    <the op's fields>,
//    "property": {"id": ..., "backend": ..., "backend_version": ..., "seed": N, "drawn": {...}},
//    "expected": <what eval prints on the reference, or {"error": {"code": ...}}>}
// `property` is written with a counterexample: the check that failed, on which
// backend, from which seed, and every value the property drew besides the case
// (a document permutation, padding, a command sequence); `attn-oracle replay`
// re-runs exactly that check. A case without one (a hand-written fixture) is
// replayed as the backend against the reference. Files of schema
// `attn-oracle.case/1` (no `property`) read the same way.
//
// Each op's fields, evaluation, judgement and coverage live in one place (its
// CaseOp, case_op.hpp): metadata_case, attention_case (attention and small_seq),
// kv_buffer_case, sharding_case.
//
// Reading never throws: a malformed file gives Error{bad_case | bad_mask |
// bad_window | bad_tensor_shape} naming the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline cases {

Expected<Case> case_from_json(const nlohmann::json& j);
Expected<Case> read_case_file(const std::string& path);
nlohmann::json case_to_json(const Case& c);
// One key per line in a fixed order, arrays of numbers on one line.
bool write_case_file(const std::string& path, const Case& c);

}  // namespace attn_oracle::cases
