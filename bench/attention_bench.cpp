// attention_bench.cpp: the two float64 reference formulations of attention (DESIGN
// section 5) against each other on the CPU, and the CUDA kernels' throughput when a
// device is present.
//
//   BM_AttentionPerDocument/T  ref::attention_per_document: every compacted document
//                              with the kernels' index rule, scalar loops per query.
//   BM_AttentionDense/T        ref::attention_dense_masked: the row against its explicit
//                              [T, T] mask, Eigen matrix products.
//   attention cuda             gpu::attention_on_device, bf16, D = 128, forward and
//                              backward TFLOP/s, only with a CUDA device.
//
// CPU inputs (make_cpu_problem below): one row of T tokens, 8 documents with lengths
// proportional to kDocWeights (positions 0..L-1 each), mask `causal`, M = 8, no
// window, heads 1, head_dim 64, fp32, forward only, data from generate_inputs(kSeed).
// Before anything is timed, per-document and dense must agree (o to 1e-12 relative,
// lse exactly where -inf and to 1e-12 elsewhere); the process aborts otherwise.
//
// Run: scripts/bench attention [--results DIR] [--benchmark_* flags]. After the table
// it prints one line per T:
//   attention T=4096: per-document 216 ms, dense 740 ms, ratio 3.43x
// (ratio = dense / per-document) and the CUDA lines or
//   attention cuda: skipped (no CUDA device)
// `--results DIR` also writes those lines to DIR/attention-<date>-<device or cpu>.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "attn_oracle/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/packed_batch.hpp"
#include "bench_support.hpp"
#if ATTN_ORACLE_BENCH_CUDA
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "device_inputs.hpp"
#endif

namespace {

using namespace attn_oracle;
using bench::CapturingReporter;
using bench::format_ms;

constexpr const char* kProgram = "attn_oracle_bench_attention";

constexpr uint64_t kSeed = 20241105;
constexpr int64_t kSizes[] = {1024, 2048, 4096, 8192};
constexpr int64_t kDocWeights[] = {5, 3, 8, 2, 6, 4, 7, 1};  // 8 documents, 1:8 length spread
constexpr int64_t kDocs = 8;

[[noreturn]] void die(const std::string& message) { bench::fatal(kProgram, message); }

// ---------------------------------------------------------------------------
// CPU inputs
// ---------------------------------------------------------------------------

// One side of `rows` rows: documents 1..n of the given lengths, positions from 0,
// padding (id 0) after the last one up to `len`.
PackedSide make_side(const std::vector<int64_t>& lengths, int64_t len, int64_t rows) {
  PackedSide side;
  side.segment_ids = IntArray::filled({rows, len}, 0);
  side.segment_pos = IntArray::filled({rows, len}, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = 0;
    for (size_t d = 0; d < lengths.size(); ++d)
      for (int64_t p = 0; p < lengths[d]; ++p, ++t) {
        side.segment_ids.data[r * len + t] = static_cast<int64_t>(d) + 1;
        side.segment_pos.data[r * len + t] = p;
      }
  }
  return side;
}

std::vector<int64_t> doc_lengths(int64_t T) {
  int64_t total_weight = 0;
  for (int64_t w : kDocWeights) total_weight += w;
  std::vector<int64_t> lengths;
  int64_t before = 0;
  for (int64_t w : kDocWeights) {
    const int64_t start = T * before / total_weight;
    before += w;
    lengths.push_back(T * before / total_weight - start);
  }
  return lengths;
}

AttentionProblem make_cpu_problem(int64_t T) {
  AttentionProblem problem;
  problem.batch.mask = MaskKind::causal;
  problem.batch.max_segments = kDocs;
  problem.batch.q = make_side(doc_lengths(T), T, 1);
  problem.batch.kv = problem.batch.q;
  problem.shape = AttentionShape{1, 1, 64, std::nullopt, Dtype::fp32, false};
  return problem;
}

struct CpuInput {
  AttentionProblem problem;
  AttentionInputs inputs;
};

// Builds the input and checks per-document == dense once (aborting loudly if not).
const CpuInput& cpu_input(int64_t T) {
  static std::map<int64_t, CpuInput> by_t;
  auto it = by_t.find(T);
  if (it != by_t.end()) return it->second;
  CpuInput in{make_cpu_problem(T), {}};
  in.inputs = generate_inputs(in.problem, kSeed);
  const auto per_doc = ref::attention_per_document(in.problem, in.inputs);
  const auto dense = ref::attention_dense_masked(in.problem, in.inputs);
  if (!per_doc || !dense) die("the reference rejected the T=" + std::to_string(T) + " input");
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < dense->o.size(); ++i) {
    scale = std::max(scale, std::fabs(dense->o[i]));
    diff = std::max(diff, std::fabs(dense->o[i] - per_doc->o[i]));
  }
  bool lse_ok = true;
  for (size_t i = 0; i < dense->lse.size(); ++i) {
    const double a = dense->lse[i], b = per_doc->lse[i];
    lse_ok &= std::isinf(a) || std::isinf(b) ? a == b : std::fabs(a - b) <= 1e-12 * std::max(1.0, std::fabs(a));
  }
  if (diff > 1e-12 * std::max(1.0, scale) || !lse_ok)
    die("per-document and dense references disagree at T=" + std::to_string(T) + "; not timing a wrong answer");
  return by_t.emplace(T, std::move(in)).first->second;
}

std::string describe(int64_t T) {
  std::string lengths;
  for (int64_t L : doc_lengths(T)) {
    if (!lengths.empty()) lengths += ',';
    lengths += std::to_string(L);
  }
  return "B=1 T=" + std::to_string(T) + " docs=" + lengths + " mask=causal M=8 H=1 D=64 fp32 forward";
}

// ---------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------

void BM_AttentionPerDocument(benchmark::State& state) {
  const CpuInput& in = cpu_input(state.range(0));
  for (auto _ : state) {
    auto r = ref::attention_per_document(in.problem, in.inputs);
    benchmark::DoNotOptimize(r);
  }
}

void BM_AttentionDense(benchmark::State& state) {
  const CpuInput& in = cpu_input(state.range(0));
  for (auto _ : state) {
    auto r = ref::attention_dense_masked(in.problem, in.inputs);
    benchmark::DoNotOptimize(r);
  }
}

// Measured on the 2-core x86_64 dev box (see bench/README.md): a T=8192 call takes
// about 1.0 s per-document and 3.5 s dense, so T >= 4096 run a fixed 2 iterations
// and the whole run (input checks included) stays near 20 s there.
BENCHMARK(BM_AttentionPerDocument)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionPerDocument)->Arg(4096)->Arg(8192)->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionDense)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionDense)->Arg(4096)->Arg(8192)->Iterations(2)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------

std::string summary_line(const CapturingReporter& reporter, int64_t T) {
  const double per_doc = reporter.mean_ms("BM_AttentionPerDocument", T);
  const double dense = reporter.mean_ms("BM_AttentionDense", T);
  if (per_doc < 0 || dense < 0) return {};  // filtered out
  char text[256];
  std::snprintf(text, sizeof text, "attention T=%lld: per-document %s ms, dense %s ms, ratio %.2fx",
                static_cast<long long>(T), format_ms(per_doc).c_str(), format_ms(dense).c_str(), dense / per_doc);
  return text;
}

// ---------------------------------------------------------------------------
// CUDA
// ---------------------------------------------------------------------------

#if ATTN_ORACLE_BENCH_CUDA
constexpr int64_t kCudaTokens = 16384;  // per configuration: kCudaTokens / L documents of L tokens
constexpr int64_t kCudaLengths[] = {512, 1024, 2048, 4096, 8192};
constexpr int kCudaHeads = 16, kCudaDim = 128, kCudaReps = 10;

// A small bf16 problem checked against the float64 reference under the tolerance
// rule before anything is timed: no throughput for a wrong answer.
void check_cuda_once() {
  AttentionProblem problem;
  problem.batch.mask = MaskKind::padding_causal;
  problem.batch.max_segments = 3;
  problem.batch.q = make_side({37, 5, 70}, 128, 2);
  problem.batch.kv = problem.batch.q;
  problem.shape = AttentionShape{4, 2, kCudaDim, std::nullopt, Dtype::bf16, true};
  const AttentionInputs inputs = generate_inputs(problem, kSeed);
  const auto cuda = gpu::attention_cuda(problem, inputs);
  if (!cuda) die("attention_cuda failed: " + cuda.error().message);
  const auto reference = ref::attention_dense_masked(problem, inputs);
  for (const ToleranceCheck& c : check_attention_tolerance(problem, inputs, cuda.value(), reference.value()))
    if (!c.pass) die("attention_cuda fails the tolerance rule: " + c.describe());
}

// attention_on_device times its own kernel launches with CUDA events (median of
// kCudaReps passes, after one checked pass); conversions and copies are excluded.
std::string cuda_line(int64_t L, bool causal) {
  const int64_t docs = kCudaTokens / L;
  PackedBatch batch;
  batch.mask = causal ? MaskKind::causal : MaskKind::no_mask;
  batch.max_segments = docs;
  batch.q = make_side(std::vector<int64_t>(docs, L), kCudaTokens, 1);
  batch.kv = batch.q;
  const auto md = gpu::metadata_twin(batch);
  if (!md) die("metadata_twin rejected the CUDA input: " + md.error().message);
  const gpu::DeviceAttentionInputs in =
      bench::bf16_attention_inputs(md.value(), batch.mask, kCudaHeads, kCudaDim, kSeed, kCudaReps);
  gpu::DeviceAttentionOutputs out;
  if (!gpu::attention_on_device(in, out)) die("attention_on_device failed: " + out.failure);
  for (float x : out.lse)
    if (std::isnan(x)) die("attention_on_device returned a NaN lse");
  // 4 * sum(Lq * Lkv) * D * H for the forward (two matmuls), 2.5x that backward, halved for causal.
  const double flops = 4.0 * double(docs) * double(L) * double(L) * kCudaDim * kCudaHeads * (causal ? 0.5 : 1.0);
  char text[256];
  std::snprintf(text, sizeof text,
                "attention cuda bf16 D=%d H=%d L=%lld x %lld docs %s: fwd %.1f TFLOP/s (%s ms), bwd %.1f TFLOP/s (%s ms)",
                kCudaDim, kCudaHeads, static_cast<long long>(L), static_cast<long long>(docs),
                causal ? "causal" : "no_mask", flops / (out.fwd_ms * 1e9), format_ms(out.fwd_ms).c_str(),
                2.5 * flops / (out.bwd_ms * 1e9), format_ms(out.bwd_ms).c_str());
  return text;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string results_dir = bench::take_results_arg(argc, argv, kProgram);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  std::vector<std::string> input_lines;
  for (int64_t T : kSizes) {  // build and check every input before anything is timed
    cpu_input(T);
    input_lines.push_back(describe(T));
    std::printf("inputs %s (per-document == dense checked)\n", input_lines.back().c_str());
  }
  std::fflush(stdout);

  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::vector<std::string> lines;
  for (int64_t T : kSizes)
    if (std::string line = summary_line(reporter, T); !line.empty()) lines.push_back(line);
  std::string device;
  if (gpu::cuda_available(&device)) {
#if ATTN_ORACLE_BENCH_CUDA
    if (device.empty()) device = "CUDA device";
    check_cuda_once();
    for (int64_t L : kCudaLengths)
      for (bool causal : {false, true}) lines.push_back(cuda_line(L, causal));
    lines.push_back("attention cuda: kernel time by CUDA events (median of " + std::to_string(kCudaReps) +
                    " passes, copies excluded), " + device);
#else
    device.clear();
    lines.push_back("attention cuda: skipped (this build has no CUDA)");
#endif
  } else {
    device.clear();
    lines.push_back("attention cuda: skipped (no CUDA device)");
  }
  const bench::ResultsFile file{kProgram, "attention",
                                "CPU inputs (bench/attention_bench.cpp, seed " + std::to_string(kSeed) +
                                    "; per-document == dense checked)"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
