// small_seq_bench.cpp: the small-sequence CPU twin (docs/semantics.md#8-small-sequence-problems)
// against the general fused-attention twin on the same problem, and the small-seq CUDA kernel's
// bandwidth when a device is present.
//
//   BM_SmallSeqTwin        gpu::small_seq_twin: one warp-shaped item per
//                          (document, kv head), 16 P slots, no tiles.
//   BM_GeneralTwin         gpu::attention_twin: the metadata path, then 16 x 16
//                          tiles of which one row is used per document.
//   small_seq cuda         gpu::small_seq_on_device, forward kernel time by CUDA
//                          events, bandwidth over the bytes of Q, K, V, O and P
//                          moved once; only with a CUDA device.
//
// Inputs (bench::small_seq_problem, bench_support.hpp): 30720 documents of one
// query and 16 keys, as 960 rows of 32 documents (q row: 32 tokens, kv row: 512
// tokens), mask `padding` (every key attended), M = 32, heads 1, head_dim 128, bf16,
// forward only, data from generate_inputs(kSeed). Before anything is timed the two twins' o must agree to
// 2 bf16 ulps of 1 (the process aborts otherwise).
//
// Run: scripts/bench small_seq [--results DIR] [--benchmark_* flags]. After the
// table it prints
//   small_seq docs=30720 keys=16 D=128: twin X ms, general twin Y ms, ratio Zx
// (ratio = general / small-seq) and the CUDA line or
//   small_seq cuda: skipped (no CUDA device)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/gpu/small_seq.hpp"
#include "bench_support.hpp"
#if ATTN_ORACLE_BENCH_CUDA
#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_plan.hpp"
#include "attn_oracle/gpu/small_seq_device.hpp"
#endif

namespace {

using namespace attn_oracle;
using bench::CapturingReporter;
using bench::format_ms;

constexpr const char* kProgram = "attn_oracle_bench_small_seq";
constexpr uint64_t kSeed = 20241106;
constexpr int64_t kDocs = 30720, kDocsPerRow = 32, kKeys = 16, kDim = 128;
constexpr int kCudaReps = 20;

[[noreturn]] void die(const std::string& message) { bench::fatal(kProgram, message); }

struct Input {
  AttentionProblem problem;
  AttentionInputs inputs;
};

// Built once; the two twins must agree before anything is timed.
const Input& input() {
  static const Input in = [] {
    Input x{bench::small_seq_problem(kDocs, kDocsPerRow, kKeys, kDim), {}};
    x.inputs = generate_inputs(x.problem, kSeed);
    const auto small = gpu::small_seq_twin(x.problem, x.inputs);
    if (!small) die("small_seq_twin rejected the input: " + small.error().message);
    const auto general = gpu::attention_twin(x.problem, x.inputs);
    if (!general) die("attention_twin rejected the input: " + general.error().message);
    double diff = 0.0;
    for (size_t i = 0; i < small->o.size(); ++i) diff = std::max(diff, std::fabs(small->o[i] - general->o[i]));
    if (diff > 2.0 * 0x1.0p-8) die("the two twins disagree (max |o diff| " + std::to_string(diff) + "); not timing");
    return x;
  }();
  return in;
}

void BM_SmallSeqTwin(benchmark::State& state) {
  const Input& in = input();
  for (auto _ : state) {
    auto r = gpu::small_seq_twin(in.problem, in.inputs);
    benchmark::DoNotOptimize(r);
  }
}

void BM_GeneralTwin(benchmark::State& state) {
  const Input& in = input();
  for (auto _ : state) {
    auto r = gpu::attention_twin(in.problem, in.inputs);
    benchmark::DoNotOptimize(r);
  }
}

// Arg = documents, so that CapturingReporter::mean_ms finds the runs by it.
BENCHMARK(BM_SmallSeqTwin)->Arg(kDocs)->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GeneralTwin)->Arg(kDocs)->Iterations(3)->Unit(benchmark::kMillisecond);

std::string summary_line(const CapturingReporter& reporter) {
  const double small = reporter.mean_ms("BM_SmallSeqTwin", kDocs);
  const double general = reporter.mean_ms("BM_GeneralTwin", kDocs);
  if (small < 0 || general < 0) return {};  // filtered out
  char text[256];
  std::snprintf(text, sizeof text, "small_seq docs=%lld keys=%lld D=%lld: twin %s ms, general twin %s ms, ratio %.2fx",
                static_cast<long long>(kDocs), static_cast<long long>(kKeys), static_cast<long long>(kDim),
                format_ms(small).c_str(), format_ms(general).c_str(), general / small);
  return text;
}

#if ATTN_ORACLE_BENCH_CUDA
// The forward kernel on the bench input, checked against the twin's o first.
std::string cuda_line(const std::string& device) {
  const Input& in = input();
  auto plan = gpu::plan_small_seq(in.problem, in.inputs);
  if (!plan) die("plan_small_seq rejected the input: " + plan.error().message);
  gpu::DeviceSmallSeqInputs d;
  d.params = gpu::small_seq_shape_params(in.problem, plan.value());
  d.max_keys = plan->max_keys;
  d.q_token = plan->q_token, d.first_key = plan->first_key, d.q_pos = plan->q_pos;
  d.keys = plan->keys, d.kv_pos = plan->kv_pos;
  for (auto [from, to] : {std::pair{&in.inputs.q, &d.q}, std::pair{&in.inputs.k, &d.k}, std::pair{&in.inputs.v, &d.v}})
    for (double x : *from) to->push_back(gpu::to_storage_bits(static_cast<float>(x), gpu::kBf16));
  d.timing_reps = kCudaReps;
  gpu::DeviceSmallSeqOutputs out;
  if (!gpu::small_seq_on_device(d, out)) die("small_seq_on_device failed: " + out.failure);
  const auto twin = gpu::small_seq_twin(in.problem, in.inputs);
  double diff = 0.0;
  for (size_t i = 0; i < twin->o.size(); ++i)
    diff = std::max(diff, std::fabs(twin->o[i] - gpu::from_storage_bits(out.o[i], gpu::kBf16)));
  if (diff > 2.0 * 0x1.0p-8) die("kernel and twin disagree (max |o diff| " + std::to_string(diff) + ")");
  // Bytes moved once: Q, K, V, O in bf16, P in fp32 (positions and document lists not counted).
  const double bytes = 2.0 * (kDocs * kDim * 2 + kDocs * kKeys * kDim * 2) + 4.0 * kDocs * 16;
  char text[256];
  std::snprintf(text, sizeof text,
                "small_seq cuda docs=%lld keys=%lld D=%lld bf16 fwd: %s ms, %.0f GB/s (Q, K, V, O, P once; median of %d), %s",
                static_cast<long long>(kDocs), static_cast<long long>(kKeys), static_cast<long long>(kDim),
                format_ms(out.fwd_ms).c_str(), bytes / (out.fwd_ms * 1e6), kCudaReps, device.c_str());
  return text;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string results_dir = bench::take_results_arg(argc, argv, kProgram);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  input();
  const std::vector<std::string> input_lines{
      "docs=30720 (960 rows x 32) keys=16 mask=padding M=32 H=1 D=128 bf16 forward"};
  std::printf("inputs %s (twins agree)\n", input_lines[0].c_str());
  std::fflush(stdout);

  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::vector<std::string> lines;
  if (std::string line = summary_line(reporter); !line.empty()) lines.push_back(line);
  std::string device;
  if (gpu::cuda_available(&device)) {
#if ATTN_ORACLE_BENCH_CUDA
    if (device.empty()) device = "CUDA device";
    lines.push_back(cuda_line(device));
#else
    device.clear();
    lines.push_back("small_seq cuda: skipped (this build has no CUDA)");
#endif
  } else {
    device.clear();
    lines.push_back("small_seq cuda: skipped (no CUDA device)");
  }
  const bench::ResultsFile file{kProgram, "small_seq",
                                "inputs (bench/small_seq_bench.cpp, seed " + std::to_string(kSeed) +
                                    "; the two twins' o agree)"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
