// bench_support.hpp: the support code the benchmark programs share (bench/*_bench.cpp):
// a console reporter that keeps the runs for the summary lines, millisecond formatting,
// the `--results DIR` argument, and the results file DIR/<bench>-<date>-<device or cpu>.md
// with its machine, device and compiler header; and the decode-shaped small-seq
// problem that the small-seq and GPU benchmarks both time.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"

namespace attn_oracle::bench {

// Prints "<program>: FATAL: <message>" to stderr and aborts.
[[noreturn]] void fatal(const std::string& program, const std::string& message);

// A console reporter that also keeps the iteration runs, for the summary lines.
class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override;
  // Mean wall-clock ms per iteration over the repetitions of `function`/T (any suffix
  // such as "/iterations:2"); < 0 if none ran.
  double mean_ms(const std::string& function, int64_t T) const;
  // The same for the process's CPU time (on a shared machine, the time the
  // benchmark was actually running, when it runs on one thread).
  double mean_cpu_ms(const std::string& function, int64_t T) const;

 private:
  std::vector<Run> runs_;
};

// Three significant digits, never an exponent: 0.312, 4.56, 78.9, 2900.
std::string format_ms(double ms);

std::string today();     // local date, "2024-11-05"
std::string machine();   // "x86_64, 2 CPUs (nproc)"
std::string compiler();  // "gcc 13.2.0" or "clang ..."

// "NVIDIA H200" -> "nvidia-h200"; "cpu" without a device.
std::string device_slug(const std::string& device);

// Takes `--results DIR` / `--results=DIR` out of argv (updating argc) and returns DIR,
// or "" without it; a bare trailing `--results` is fatal for `program`. Run before
// benchmark::Initialize.
std::string take_results_arg(int& argc, char** argv, const std::string& program);

// What write_results needs besides the lines.
struct ResultsFile {
  std::string program;        // for the FATAL message, e.g. "attn_oracle_bench_metadata"
  std::string bench;          // "metadata": file DIR/metadata-<date>-<slug>.md, title, scripts/bench NAME
  std::string inputs_header;  // the list item that introduces the input lines, without "- " and ":\n"
};

// Writes DIR/<bench>-<date>-<device slug>.md: a header (machine, device, compiler, how
// it was produced, the inputs) and the summary lines in a code block; prints its path.
void write_results(const ResultsFile& file, const std::string& dir, const std::string& device,
                   const std::vector<std::string>& input_lines, const std::vector<std::string>& lines);

// The end of every bench program: prints the summary lines and, when `dir` (from
// --results) is set, writes them with write_results.
void print_summary(const ResultsFile& file, const std::string& dir, const std::string& device,
                   const std::vector<std::string>& input_lines, const std::vector<std::string>& lines);

// One thread's float64 peak in GFLOP/s: the best of three ~0.2 s runs of 12
// independent multiply-add chains in the widest vector unit the CPU has (AVX2
// FMA, else SSE2 multiply and add), per second of the thread's CPU time (so that
// other processes on a shared machine do not lower it). `how` names what was measured.
double float64_peak_gflops(std::string* how);

// `docs` documents of one query and `keys` keys each (docs a multiple of docs_per_row),
// as rows of `docs_per_row` documents: q row docs_per_row tokens, each query at
// position keys - 1; kv row docs_per_row * keys tokens. Mask `padding` (every key
// attended), M = docs_per_row, one head of `head_dim`, bf16, forward only.
AttentionProblem small_seq_problem(int64_t docs, int64_t docs_per_row, int64_t keys, int64_t head_dim);

}  // namespace attn_oracle::bench
