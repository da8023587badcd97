// planted_backends.hpp: deliberately broken backends, one per property, each
// modelled on a bug a real packed-attention stack shipped. tests/planted_bugs_test.cpp
// asserts that the named property catches each one and shrinks it to a small case.
// None of them is registered: the conformance suite never sees them.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::planted {

struct PlantedBug {
  std::string name;      // fixtures/regressions/<name>.case.json pins it
  std::string property;  // the property that must catch it
  std::string what;      // what is broken, one line
  std::function<std::unique_ptr<Backend>()> make;
  bool needs_extra_dims = false;  // it lives in vmapped extra dims: its counterexample keeps them
  int64_t max_shrunk_tokens = 8;  // "shrunk small": at most this many tokens a side
  int64_t max_shrunk_rows = 2;    // and this many broadcast rows
  // 0: the default seed. A bug the checks see only statistically (one ulp)
  // is found on 9 seeds of 10 (BugsOfEachInputClassAreFoundOnNineOfTenSeeds),
  // not on every one: its shrink test runs on a seed that finds it.
  uint64_t seed = 0;
};

inline void PrintTo(const PlantedBug& b, std::ostream* os) { *os << b.name << " (" << b.property << ")"; }

// `compute` with GQA's head mapping written as h % Hkv instead of h / (Hq / Hkv):
// the planted kv_head_modulo bug, and the same bug planted in an oracle.
Expected<AttentionResult> with_kv_head_modulo(const AttentionProblem& problem, const AttentionInputs& in,
                                              Expected<AttentionResult> (*compute)(const AttentionProblem&,
                                                                                   const AttentionInputs&));

// `forward` with the float64 reference's gradients when the problem is backward:
// the planted forward-only kernels (tiled, convention mocks) are judged on o and lse.
Expected<AttentionResult> with_reference_gradients(AttentionResult forward, const AttentionProblem& problem,
                                                   const AttentionInputs& in);

std::vector<PlantedBug> metadata_bugs();
std::vector<PlantedBug> attention_bugs();
std::vector<PlantedBug> small_seq_bugs();
std::vector<PlantedBug> kv_buffer_bugs();
std::vector<PlantedBug> sharding_bugs();
std::vector<PlantedBug> context_parallel_bugs();
std::vector<PlantedBug> convention_bugs();  // mock kernels in other stacks' conventions, misapplied

// A backend whose metadata is the reference's passed through `transform`.
std::unique_ptr<Backend> metadata_backend(
    std::string name, std::function<Expected<Metadata>(const PackedBatch&)> compute);
// A backend whose attention is `compute`.
std::unique_ptr<Backend> attention_backend(
    std::string name,
    std::function<Expected<AttentionResult>(const AttentionProblem&, const AttentionInputs&)> compute);

// A backend whose small_seq is `compute` and whose attention is the float64
// dense reference (so that small_seq/matchesGeneralAttention runs on it).
std::unique_ptr<Backend> small_seq_backend(
    std::string name,
    std::function<Expected<SmallSeqResult>(const AttentionProblem&, const AttentionInputs&)> compute);

}  // namespace attn_oracle::planted
