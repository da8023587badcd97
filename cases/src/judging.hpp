// judging.hpp (internal): the verdict steps every op's judge() shares.
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/seam/backend_takes.hpp"
#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle::inline cases {

std::string missing_capability(const Backend& backend, Capability capability);

// What a case says when the backend does not take it (seam/backend_takes.hpp's reason).
inline std::string declined_by(const Backend& backend, const std::string& reason) {
  return "backend " + backend.name() + " declines this case: " + reason;
}

inline std::string describe(const Error& e) { return std::string(to_string(e.code)) + " (" + e.message + ")"; }

// When either side is an error, decides the judgement (the same code passes)
// and returns true; returns false when both hold a result to compare. A
// reference over its memory budget, or a backend that answers `unsupported`,
// judges nothing: a skip with the reason, never a failure of the backend.
template <class Got, class Want>
bool judge_errors(const Expected<Got>& got, const Expected<Want>& want, Judgement& j) {
  if (got && want) return false;
  if (!want && want.error().code == ErrorCode::over_memory_budget)
    return j.skip("the reference cannot evaluate this case: " + describe(want.error())), true;
  if (!got && got.error().code == ErrorCode::unsupported)
    return j.skip("the backend declines this case: " + describe(got.error())), true;
  if (!got && !want) {
    if (got.error().code == want.error().code)
      j.note("both reject the input with " + std::string(to_string(got.error().code)));
    else
      j.fail("error code: backend " + describe(got.error()) + ", reference " + describe(want.error()));
  } else if (!got) {
    j.fail("backend rejects a valid input: " + describe(got.error()));
  } else {
    j.fail("backend accepts an invalid input; reference: " + describe(want.error()));
  }
  return true;
}

// Every metadata field exactly, each differing entry a failure line starting with `prefix`.
void compare_metadata(const Metadata& got, const Metadata& want, Judgement& j, const std::string& prefix = "");

// Each tolerance check a line: failures, then the checks that held.
void judge_tolerance(const std::vector<ToleranceCheck>& checks, Judgement& j);

// mask row; B=1 / B>1, extra dims, Tq!=Tkv, window.
CoverageCell batch_coverage(const PackedBatch& batch);
// rows (extra x B) and the longer side's T of a packed batch.
CaseSize batch_size(const PackedBatch& batch);
// adds GQA and "<dtype> fwd" / "<dtype> fwd+bwd".
void add_shape_coverage(const AttentionShape& shape, CoverageCell& cell);
// "keys 64k+1, head_dim>=64": a document one key past a kernel kv tile at a head dim
// of the kernels' wide path (document_sizes.hpp), where their rescale lives.
void add_tile_edge_coverage(const AttentionProblem& problem, CoverageCell& cell);

}  // namespace attn_oracle::cases
