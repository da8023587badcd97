// attention_bench.cpp: the float64 references (docs/semantics.md#5-attention-outputs-and-gradients)
// on the CPU, against the scalar loops they replaced, and the CUDA kernels' throughput when a
// device is present.
//
//   BM_PerDocument/T        ref::attention_per_document: query tiles of each
//                           compacted document, Eigen block products.
//   BM_PerDocumentScalar/T  ref::scalar::attention_per_document (reference/scalar/):
//                           scalar loops per query, three dot products per pair.
//   BM_Dense/T              ref::attention_dense_masked: query tiles against the
//                           key blocks the explicit mask attends.
//   BM_DenseScalar/T        ref::scalar::attention_dense_masked: the whole [T, T]
//                           row in Eigen products, all pairs masked or not. T = 4096
//                           only: at 16384 its rows need 6.7 GB (over the 4 GiB
//                           budget) and about ten minutes.
//   attention cuda          gpu::attention_on_device (the tensor-core kernels of
//                           `cuda`), bf16, D = 128, forward and backward TFLOP/s,
//                           only with a CUDA device.
//
// CPU inputs (make_cpu_problem below): one row of T tokens, 8 documents with lengths
// proportional to kDocWeights (positions 0..L-1 each), mask `causal`, M = 8, no
// window, heads 8, head_dim 128, fp32, forward and backward, data from
// generate_inputs(kSeed); the references run on one thread (set_reference_threads(1)).
// Each benchmark runs once; afterwards every blocked result must agree with its
// scalar one and dense with per-document (o, lse, dq, dk, dv to 1e-12 relative,
// normwise per tensor, lse -inf exactly), or the process aborts and writes nothing.
//
// Run: scripts/bench attention [--results DIR] [--benchmark_* flags]; about 12
// minutes on the 2-core x86_64 dev box, most of it the scalar per-document loops at
// T = 16384. After the table it prints one line per measurement, wall-clock and
// CPU time (the machine may be shared: both ratios come from one run):
//   attention T=4096 per-document: 3980 ms, scalar 20900 ms, 5.2x; CPU 1980 ms, scalar 10400 ms, 5.2x; 8.17 GFLOP/s, 14.1% of one thread's float64 peak (scalar 2.79%)
// then the peak it measured and the largest differences from the scalar loops.
// FLOPs: 12 * D * H per attended pair (4 forward: Q K^T, P V; 8 backward: dP, dQ,
// dK, dV), the products any formulation needs; recomputation is not counted.
// GFLOP/s are per second of CPU time, like the peak (bench::float64_peak_gflops).
// `--results DIR` also writes those lines to DIR/attention-<date>-<device or cpu>.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "bench_support.hpp"
#include "scalar_attention.hpp"
#if ATTN_ORACLE_BENCH_CUDA
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "device_inputs.hpp"
#endif

namespace {

using namespace attn_oracle;
using bench::CapturingReporter;
using bench::format_ms;

constexpr const char* kProgram = "attn_oracle_bench_attention";

constexpr uint64_t kSeed = 20241105;
constexpr int64_t kSizes[] = {4096, 16384};
constexpr int64_t kDenseScalarMaxT = 4096;
constexpr int64_t kDocWeights[] = {5, 3, 8, 2, 6, 4, 7, 1};  // 8 documents, 1:8 length spread
constexpr int64_t kDocs = 8, kHeads = 8, kDim = 128;
constexpr double kAgreement = 1e-12;

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
  problem.shape = AttentionShape{kHeads, kHeads, kDim, std::nullopt, Dtype::fp32, true};
  return problem;
}

// 12 D H per attended pair; a causal document of L tokens attends L (L + 1) / 2 pairs.
double useful_flops(int64_t T) {
  double pairs = 0;
  for (int64_t L : doc_lengths(T)) pairs += 0.5 * double(L) * double(L + 1);
  return 12.0 * kDim * kHeads * pairs;
}

struct CpuInput {
  AttentionProblem problem;
  AttentionInputs inputs;
};

const CpuInput& cpu_input(int64_t T) {
  static std::map<int64_t, CpuInput> by_t;
  auto it = by_t.find(T);
  if (it != by_t.end()) return it->second;
  CpuInput in{make_cpu_problem(T), {}};
  in.inputs = generate_inputs(in.problem, kSeed);
  return by_t.emplace(T, std::move(in)).first->second;
}

std::string describe(int64_t T) {
  std::string lengths;
  for (int64_t L : doc_lengths(T)) {
    if (!lengths.empty()) lengths += ',';
    lengths += std::to_string(L);
  }
  return "B=1 T=" + std::to_string(T) + " docs=" + lengths + " mask=causal M=8 H=8 D=128 fp32 forward+backward";
}

// ---------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------

using Formulation = Expected<AttentionResult> (*)(const AttentionProblem&, const AttentionInputs&);

// The last result of each benchmark, "BM_Dense/4096" -> result, checked after the run.
std::map<std::string, AttentionResult>& results() {
  static std::map<std::string, AttentionResult> by_name;
  return by_name;
}

void run_formulation(benchmark::State& state, const char* name, Formulation f) {
  const int64_t T = state.range(0);
  const CpuInput& in = cpu_input(T);
  Expected<AttentionResult> r = Error{ErrorCode::unsupported, "not run"};
  for (auto _ : state) {
    r = f(in.problem, in.inputs);
    benchmark::DoNotOptimize(r);
  }
  if (!r) die(std::string(name) + " rejected the T=" + std::to_string(T) + " input: " + r.error().message);
  results()[std::string(name) + "/" + std::to_string(T)] = std::move(r.value());
}

void BM_PerDocument(benchmark::State& s) { run_formulation(s, "BM_PerDocument", ref::attention_per_document); }
void BM_PerDocumentScalar(benchmark::State& s) {
  run_formulation(s, "BM_PerDocumentScalar", ref::scalar::attention_per_document);
}
void BM_Dense(benchmark::State& s) { run_formulation(s, "BM_Dense", ref::attention_dense_masked); }
void BM_DenseScalar(benchmark::State& s) { run_formulation(s, "BM_DenseScalar", ref::scalar::attention_dense_masked); }

// Measured on the 2-core x86_64 dev box, shared with other builds: at T = 16384 the
// blocked references take about a minute and the scalar per-document loops eight,
// so every benchmark runs one fixed iteration.
BENCHMARK(BM_PerDocument)->Arg(4096)->Arg(16384)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PerDocumentScalar)->Arg(4096)->Arg(16384)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Dense)->Arg(4096)->Arg(16384)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DenseScalar)->Arg(kDenseScalarMaxT)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Agreement and summary
// ---------------------------------------------------------------------------

// Largest normwise relative difference, max |a - b| / max(1, max |b|) per output
// tensor (as tests/reference_tiles_test.cpp); infinity where lse's -inf differ.
double largest_difference(const AttentionResult& a, const AttentionResult& b) {
  double worst = 0.0;
  auto compare = [&](const std::vector<double>& x, const std::vector<double>& y) {
    if (x.size() != y.size()) worst = INFINITY;
    double scale = 1.0, diff = 0.0;
    for (double v : y)
      if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (std::isinf(x[i]) || std::isinf(y[i])) {
        if (x[i] != y[i]) worst = INFINITY;
        continue;
      }
      diff = std::max(diff, std::fabs(x[i] - y[i]));
    }
    worst = std::max(worst, diff / scale);
  };
  compare(a.o, b.o);
  compare(a.lse, b.lse);
  if (a.grads.has_value() != b.grads.has_value()) return INFINITY;
  if (a.grads) {
    compare(a.grads->dq, b.grads->dq);
    compare(a.grads->dk, b.grads->dk);
    compare(a.grads->dv, b.grads->dv);
  }
  return worst;
}

// Checks every pair that ran; returns "per-document 4.7e-15 (T=4096), ..." for the summary.
std::string check_agreement() {
  std::string line;
  auto check = [&](const std::string& blocked, const std::string& other, int64_t T, const char* label) {
    const auto a = results().find(blocked + "/" + std::to_string(T));
    const auto b = results().find(other + "/" + std::to_string(T));
    if (a == results().end() || b == results().end()) return;  // filtered out
    const double d = largest_difference(a->second, b->second);
    if (!(d <= kAgreement))
      die(blocked + " and " + other + " disagree at T=" + std::to_string(T) + " (" + std::to_string(d) +
          "); not reporting the timing of a wrong answer");
    char text[128];
    std::snprintf(text, sizeof text, "%s%s %.1e (T=%lld)", line.empty() ? "" : ", ", label, d,
                  static_cast<long long>(T));
    line += text;
  };
  for (int64_t T : kSizes) {
    check("BM_PerDocument", "BM_PerDocumentScalar", T, "per-document vs scalar");
    check("BM_Dense", "BM_DenseScalar", T, "dense vs scalar");
    check("BM_Dense", "BM_PerDocument", T, "dense vs per-document");
  }
  return line.empty() ? "" : "largest difference, max |a - b| / max(1, max |b|) per tensor: " + line;
}

// "attention T=4096 per-document: 3980 ms, scalar 20900 ms, 5.2x; CPU 1980 ms, scalar 10400 ms, 5.2x; ..."
// GFLOP/s per second of CPU time, as the peak is measured.
std::string summary_line(const CapturingReporter& reporter, int64_t T, const char* label, const std::string& blocked,
                         const std::string& scalar, double peak_gflops) {
  const double ms = reporter.mean_ms(blocked, T), scalar_ms = reporter.mean_ms(scalar, T);
  const double cpu_ms = reporter.mean_cpu_ms(blocked, T), scalar_cpu_ms = reporter.mean_cpu_ms(scalar, T);
  if (ms < 0) return {};  // filtered out
  auto percent_of_peak = [&](double milliseconds) { return 100 * useful_flops(T) / (milliseconds * 1e6) / peak_gflops; };
  char text[512];
  if (scalar_ms < 0) {
    std::snprintf(text, sizeof text, "attention T=%lld %s: %s ms, scalar not run; CPU %s ms; %.2f GFLOP/s, %.1f%% of one thread's float64 peak",
                  static_cast<long long>(T), label, format_ms(ms).c_str(), format_ms(cpu_ms).c_str(),
                  useful_flops(T) / (cpu_ms * 1e6), percent_of_peak(cpu_ms));
  } else {
    std::snprintf(text, sizeof text,
                  "attention T=%lld %s: %s ms, scalar %s ms, %.1fx; CPU %s ms, scalar %s ms, %.1fx; %.2f GFLOP/s, "
                  "%.1f%% of one thread's float64 peak (scalar %.2f%%)",
                  static_cast<long long>(T), label, format_ms(ms).c_str(), format_ms(scalar_ms).c_str(), scalar_ms / ms,
                  format_ms(cpu_ms).c_str(), format_ms(scalar_cpu_ms).c_str(), scalar_cpu_ms / cpu_ms,
                  useful_flops(T) / (cpu_ms * 1e6), percent_of_peak(cpu_ms), percent_of_peak(scalar_cpu_ms));
  }
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
  set_reference_threads(1);

  std::string peak_how;
  const double peak = bench::float64_peak_gflops(&peak_how);
  std::vector<std::string> input_lines;
  for (int64_t T : kSizes) {  // build every input before anything is timed
    cpu_input(T);
    input_lines.push_back(describe(T));
    std::printf("inputs %s\n", input_lines.back().c_str());
  }
  std::fflush(stdout);

  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const std::string agreement = check_agreement();  // aborts on a disagreement
  std::vector<std::string> lines;
  for (int64_t T : kSizes)
    for (auto [label, blocked, scalar] : {std::tuple{"per-document", "BM_PerDocument", "BM_PerDocumentScalar"},
                                          std::tuple{"dense", "BM_Dense", "BM_DenseScalar"}})
      if (std::string line = summary_line(reporter, T, label, blocked, scalar, peak); !line.empty())
        lines.push_back(line);
  char peak_line[256];
  std::snprintf(peak_line, sizeof peak_line,
                "float64 peak, one thread: %.1f GFLOP/s (%s); the references run on one thread, built with "
                "the project's flags (no -march: Eigen's SSE2 kernels, no FMA)",
                peak, peak_how.c_str());
  lines.push_back(peak_line);
  if (!agreement.empty()) lines.push_back(agreement);
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
                                    "; blocked == scalar and dense == per-document checked after the run)"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
