// bench_support.cpp: the shared benchmark support declared in bench_support.hpp
// (capturing reporter, ms formatting, --results handling, the results file, the
// small-seq problem).
#include "bench_support.hpp"

#include <immintrin.h>
#include <sched.h>
#include <sys/utsname.h>

#include <algorithm>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

namespace attn_oracle::bench {

void fatal(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: FATAL: %s\n", program.c_str(), message.c_str());
  std::fflush(stderr);
  std::abort();
}

void CapturingReporter::ReportRuns(const std::vector<Run>& reports) {
  for (const Run& run : reports)
    if (run.run_type == Run::RT_Iteration && !run.error_occurred) runs_.push_back(run);
  ConsoleReporter::ReportRuns(reports);
}

double CapturingReporter::mean_ms(const std::string& function, int64_t T) const {
  double seconds = 0, iterations = 0;
  for (const Run& run : runs_)
    if (run.run_name.function_name == function && run.run_name.args == std::to_string(T))
      seconds += run.real_accumulated_time, iterations += double(run.iterations);
  return iterations > 0 ? 1e3 * seconds / iterations : -1.0;
}

double CapturingReporter::mean_cpu_ms(const std::string& function, int64_t T) const {
  double seconds = 0, iterations = 0;
  for (const Run& run : runs_)
    if (run.run_name.function_name == function && run.run_name.args == std::to_string(T))
      seconds += run.cpu_accumulated_time, iterations += double(run.iterations);
  return iterations > 0 ? 1e3 * seconds / iterations : -1.0;
}

std::string format_ms(double ms) {
  char text[64];
  std::snprintf(text, sizeof text, ms >= 100 ? "%.0f" : ms >= 10 ? "%.1f" : ms >= 1 ? "%.2f" : "%.3f", ms);
  return text;
}

namespace {

constexpr int kChains = 12;  // > latency x ports of any current FMA unit

// acc = acc * 0.5 + 0.5 stays at 1: no overflow, no subnormals.
__attribute__((target("avx2,fma"))) double fma_chains_avx2(int64_t steps) {
  __m256d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_pd(double(c));
  const __m256d half = _mm256_set1_pd(0.5);
  for (int64_t s = 0; s < steps; ++s)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_pd(acc[c], half, half);
  double sum = 0.0, lanes[4];
  for (int c = 0; c < kChains; ++c) {
    _mm256_storeu_pd(lanes, acc[c]);
    sum += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  return sum;
}

double mul_add_chains_sse2(int64_t steps) {
  __m128d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_pd(double(c));
  const __m128d half = _mm_set1_pd(0.5);
  for (int64_t s = 0; s < steps; ++s)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_pd(_mm_mul_pd(acc[c], half), half);
  double sum = 0.0, lanes[2];
  for (int c = 0; c < kChains; ++c) {
    _mm_storeu_pd(lanes, acc[c]);
    sum += lanes[0] + lanes[1];
  }
  return sum;
}

}  // namespace

double float64_peak_gflops(std::string* how) {
  const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const double flops_per_step = kChains * (fma ? 4 * 2 : 2 * 2);
  const int64_t steps = 20'000'000;
  double best = 0.0;
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  for (int run = 0; run < 3; ++run) {
    const double start = cpu_seconds();
    double sum = fma ? fma_chains_avx2(steps) : mul_add_chains_sse2(steps);
    benchmark::DoNotOptimize(sum);
    const double seconds = cpu_seconds() - start;
    best = std::max(best, flops_per_step * double(steps) / seconds / 1e9);
  }
  if (how) *how = std::string(fma ? "AVX2 FMA" : "SSE2 multiply and add") + ", 12 chains, best of 3";
  return best;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &local);
  return text;
}

std::string machine() {
  utsname u{};
  const std::string arch = uname(&u) == 0 ? u.machine : "unknown";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                : int(std::thread::hardware_concurrency());
  return arch + ", " + std::to_string(cpus) + " CPUs (nproc)";
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown compiler";
#endif
}

std::string device_slug(const std::string& device) {
  if (device.empty()) return "cpu";
  std::string slug;
  for (char c : device) {
    if (std::isalnum(static_cast<unsigned char>(c))) slug += char(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-') slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "cuda" : slug;
}

std::string take_results_arg(int& argc, char** argv, const std::string& program) {
  std::string results_dir;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--results" && i + 1 < argc) results_dir = argv[++i];
    else if (arg.rfind("--results=", 0) == 0) results_dir = arg.substr(10);
    else if (arg == "--results") fatal(program, "--results needs a directory");
    else argv[kept++] = argv[i];
  }
  argc = kept;
  return results_dir;
}

void write_results(const ResultsFile& file, const std::string& dir, const std::string& device,
                   const std::vector<std::string>& input_lines, const std::vector<std::string>& lines) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + file.bench + "-" + today() + "-" + device_slug(device) + ".md";
  std::ofstream out(path);
  out << "# " << file.bench << " benchmark, " << today() << "\n\n"
      << "- machine: " << machine() << "\n"
      << "- device: " << (device.empty() ? "none (CPU only)" : device) << "\n"
      << "- compiler: " << compiler() << "\n"
      << "- produced by: scripts/bench " << file.bench << " --results " << dir << "\n"
      << "- " << file.inputs_header << ":\n";
  for (const std::string& line : input_lines) out << "  - " << line << "\n";
  out << "\n```\n";
  for (const std::string& line : lines) out << line << "\n";
  out << "```\n";
  if (!out) fatal(file.program, "cannot write " + path);
  std::printf("results written to %s\n", path.c_str());
}

AttentionProblem small_seq_problem(int64_t docs, int64_t docs_per_row, int64_t keys, int64_t head_dim) {
  const int64_t rows = docs / docs_per_row, tq = docs_per_row, tkv = docs_per_row * keys;
  AttentionProblem p;
  p.batch.mask = MaskKind::padding;
  p.batch.max_segments = docs_per_row;
  p.batch.q.segment_ids = IntArray::filled({rows, tq}, 0);
  p.batch.q.segment_pos = IntArray::filled({rows, tq}, keys - 1);
  p.batch.kv.segment_ids = IntArray::filled({rows, tkv}, 0);
  p.batch.kv.segment_pos = IntArray::filled({rows, tkv}, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < docs_per_row; ++d) {
      p.batch.q.segment_ids.data[r * tq + d] = d + 1;
      for (int64_t j = 0; j < keys; ++j) {
        p.batch.kv.segment_ids.data[r * tkv + d * keys + j] = d + 1;
        p.batch.kv.segment_pos.data[r * tkv + d * keys + j] = j;
      }
    }
  p.shape = AttentionShape{1, 1, head_dim, std::nullopt, Dtype::bf16, false};
  return p;
}

void print_summary(const ResultsFile& file, const std::string& dir, const std::string& device,
                   const std::vector<std::string>& input_lines, const std::vector<std::string>& lines) {
  std::printf("\n");
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (!dir.empty()) write_results(file, dir, device, input_lines, lines);
}

}  // namespace attn_oracle::bench
