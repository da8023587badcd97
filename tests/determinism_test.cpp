// determinism_test.cpp: the same seed gives the same bytes. A property run twice
// with one seed writes byte-identical counterexample files (what makes a
// reproduce line worth printing; the reports of `attn-oracle check` are checked
// the same way in check_command_test.cpp); and the twins' deterministic backward gives
// bitwise-identical gradients run after run (the CUDA kernels use the same
// fixed-order reduction; that is checked on a device by the GPU suite).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_determinism" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The first planted bug of each family, run twice from the same seed.
TEST(Determinism, SameSeedWritesByteIdenticalCounterexamples) {
  for (const auto& bugs : {planted::metadata_bugs(), planted::attention_bugs(), planted::small_seq_bugs()}) {
    const planted::PlantedBug& bug = bugs.front();
    std::string files[2];
    for (int run = 0; run < 2; ++run) {
      RunSettings settings = default_run_settings();
      settings.seed = 20261122;
      settings.failures_dir = fresh_dir(bug.name + "_" + std::to_string(run)).string();
      auto backend = bug.make();
      const PropertyOutcome o = run_property(*find_property(bug.property), *backend, settings);
      ASSERT_EQ(o.status, PropertyOutcome::Status::failed) << bug.name;
      files[run] = slurp(o.failures.at(0).case_path);
    }
    EXPECT_FALSE(files[0].empty());
    EXPECT_EQ(files[0], files[1]) << bug.name;
  }
}

bool bitwise_equal(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// Several documents, GQA, a window and bottom-right causal: every tile path of
// the backward (partial tiles, skipped tiles, shared kv heads) is exercised.
AttentionProblem backward_problem() {
  PackedBatch b;
  b.mask = MaskKind::causal_bottom_right;
  b.window = Window{5, -1};
  b.max_segments = 3;
  b.q.segment_ids = {{1, 12}, {1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3}};
  b.q.segment_pos = {{1, 12}, {0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3}};
  b.kv.segment_ids = {{1, 20}, {1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3}};
  b.kv.segment_pos = {{1, 20}, {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6}};
  AttentionShape s;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 16;
  s.dtype = Dtype::bf16;
  s.backward = true;
  return AttentionProblem{b, s};
}

TEST(Determinism, TwinBackwardIsBitwiseReproducible) {
  const AttentionProblem p = backward_problem();
  const AttentionInputs in = generate_inputs(p, 99);
  const auto first = gpu::attention_twin(p, in);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(first->grads);
  for (int run = 0; run < 3; ++run) {
    const auto again = gpu::attention_twin(p, in);
    ASSERT_TRUE(again && again->grads);
    EXPECT_TRUE(bitwise_equal(first->o, again->o));
    EXPECT_TRUE(bitwise_equal(first->lse, again->lse));
    EXPECT_TRUE(bitwise_equal(first->grads->dq, again->grads->dq));
    EXPECT_TRUE(bitwise_equal(first->grads->dk, again->grads->dk));
    EXPECT_TRUE(bitwise_equal(first->grads->dv, again->grads->dv));
  }
}

}  // namespace
}  // namespace attn_oracle
