// metadata_bench.cpp: what the O(T) metadata algorithm (docs/semantics.md#3-metadata) buys over
// the explicit-mask reference, measured with Google Benchmark.
//
//   BM_MetadataTwin/T      gpu::metadata_twin: the kernels' token, run and slot steps in
//                          CPU loops, O(B*T + B*M) time and memory.
//   BM_MetadataMaskPath/T  ref::metadata: validation, then the explicit [Tq, Tkv] char mask
//                          of each row (one row alive at a time) and metadata read off it.
//   metadata cuda          gpu::metadata_cuda (the token-parallel kernels) at B = 8,
//                          T = 131072, only with a CUDA device.
//
// Inputs (make_cross_attention_batch below, deterministic from kSeed): packed
// cross-attention, B = 4 rows, Tq = T, Tkv = T + T/2, M = 8, 7 or 8 documents per row,
// positions 0..L-1 per document, padding gaps after documents 2 and 5 and at the end of
// each side, mask padding_causal_bottom_right, no window. Per-document kv/q length
// ratios vary around 1.5, so some documents have fewer kv than q tokens and bottom-right
// trimming drops their first queries. Before anything is timed, twin and reference must
// give identical Metadata for every T (the process aborts otherwise), and with a device
// the CUDA result must equal the twin's.
//
// Run: scripts/bench metadata [--results DIR] [--benchmark_* flags]. After the table it
// prints one line per T:
//   metadata T=16384: twin 0.31 ms, mask 2900 ms, speedup 9350x, scratch 12 B/token vs 268435456 B/row
// where "B/token" is metadata_twin_scratch_bytes / (rows * (Tq + Tkv)) and "B/row" is
// the mask path's peak scratch per row, Tq * Tkv bytes (its char mask).
// `--results DIR` also writes those lines to DIR/metadata-<date>-<device or cpu>.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "bench_support.hpp"

namespace {

using namespace attn_oracle;
using bench::CapturingReporter;
using bench::format_ms;

constexpr const char* kProgram = "attn_oracle_bench_metadata";

constexpr uint64_t kSeed = 20240917;
constexpr int64_t kRows = 4;
constexpr int64_t kMaxSegments = 8;
constexpr int64_t kSizes[] = {1024, 4096, 16384};
constexpr int64_t kCudaRows = 8;
constexpr int64_t kCudaT = 131072;
constexpr int kCudaReps = 20;

[[noreturn]] void die(const std::string& message) { bench::fatal(kProgram, message); }

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

// SplitMix64, with our own mapping to ranges: std distributions differ between
// standard libraries, and the inputs must be the same everywhere.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive; modulo bias is irrelevant here
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

// Lays out one side of one row of length `len`: documents 1..weights.size() with
// lengths proportional to `weights`, a gap of U[1, len/128] padding tokens after
// documents 2 and 5, and U[len/32, len/16] padding tokens at the end.
void layout_side(SplitMix64& rng, const std::vector<int64_t>& weights, int64_t len, int64_t* ids,
                 int64_t* pos, int64_t* padding) {
  const int64_t docs = static_cast<int64_t>(weights.size());
  std::vector<int64_t> gap_after(docs, 0);
  for (int64_t k : {1, 4})
    if (k < docs - 1) gap_after[k] = rng.uniform(1, std::max<int64_t>(1, len / 128));
  const int64_t end_pad = rng.uniform(len / 32, len / 16);
  int64_t used = end_pad, total_weight = 0;
  for (int64_t k = 0; k < docs; ++k) used += gap_after[k], total_weight += weights[k];
  const int64_t budget = len - used;  // tokens shared by the documents
  *padding = used;
  int64_t t = 0, weight_before = 0;
  for (int64_t k = 0; k < docs; ++k) {
    const int64_t start = budget * weight_before / total_weight;
    weight_before += weights[k];
    const int64_t doc_len = budget * weight_before / total_weight - start;
    if (doc_len < 1) die("input builder made an empty document; T is too small");
    for (int64_t p = 0; p < doc_len; ++p, ++t) ids[t] = k + 1, pos[t] = p;
    for (int64_t g = 0; g < gap_after[k]; ++g, ++t) ids[t] = 0, pos[t] = 0;
  }
  for (; t < len; ++t) ids[t] = 0, pos[t] = 0;
}

struct InputStats {
  std::vector<int64_t> docs_per_row;
  int64_t q_padding = 0, kv_padding = 0;
};

// Row r: 7 or 8 documents (7 + r % 2). Document k draws a q weight U[1, 8] and a kv/q
// factor U[2, 10] / 4 (in [0.5, 2.5], mean 1.5); the q side splits its budget by the q
// weights, the kv side by q weight * factor. Sides are laid out independently.
PackedBatch make_cross_attention_batch(int64_t rows, int64_t T, InputStats* stats) {
  const int64_t Tq = T, Tkv = T + T / 2;
  SplitMix64 rng{kSeed ^ (static_cast<uint64_t>(T) << 32) ^ static_cast<uint64_t>(rows)};
  PackedBatch b;
  b.mask = MaskKind::padding_causal_bottom_right;
  b.max_segments = kMaxSegments;
  b.q.segment_ids = IntArray::filled({rows, Tq}, 0);
  b.q.segment_pos = IntArray::filled({rows, Tq}, 0);
  b.kv.segment_ids = IntArray::filled({rows, Tkv}, 0);
  b.kv.segment_pos = IntArray::filled({rows, Tkv}, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t docs = 7 + r % 2;
    std::vector<int64_t> wq(docs), wkv(docs);
    for (int64_t k = 0; k < docs; ++k) {
      wq[k] = rng.uniform(1, 8);
      wkv[k] = wq[k] * rng.uniform(2, 10);
    }
    int64_t q_pad = 0, kv_pad = 0;
    layout_side(rng, wq, Tq, &b.q.segment_ids.data[r * Tq], &b.q.segment_pos.data[r * Tq], &q_pad);
    layout_side(rng, wkv, Tkv, &b.kv.segment_ids.data[r * Tkv], &b.kv.segment_pos.data[r * Tkv], &kv_pad);
    stats->docs_per_row.push_back(docs);
    stats->q_padding += q_pad;
    stats->kv_padding += kv_pad;
  }
  return b;
}

struct BenchInput {
  PackedBatch batch;
  InputStats stats;
  int64_t rows = 0, q_len = 0, kv_len = 0;
  int64_t q_trimmed = 0;       // non-padding q tokens that attend nothing
  int64_t twin_scratch = 0;    // metadata_twin_scratch_bytes
  int64_t tokens() const { return rows * (q_len + kv_len); }
  double twin_scratch_per_token() const { return double(twin_scratch) / double(tokens()); }
  int64_t mask_bytes_per_row() const { return q_len * kv_len; }  // char mask [Tq, Tkv]
};

std::string describe(const BenchInput& in) {
  std::string docs;
  for (int64_t d : in.stats.docs_per_row) {
    if (!docs.empty()) docs += ',';
    docs += std::to_string(d);
  }
  return "B=" + std::to_string(in.rows) + " Tq=" + std::to_string(in.q_len) + " Tkv=" + std::to_string(in.kv_len) +
         " M=" + std::to_string(kMaxSegments) + " docs/row=" + docs + " padding q=" + std::to_string(in.stats.q_padding) +
         " kv=" + std::to_string(in.stats.kv_padding) + " tokens, q tokens trimmed=" + std::to_string(in.q_trimmed);
}

// Builds the input and checks twin == reference once (aborting loudly if not).
BenchInput build_checked_input(int64_t rows, int64_t T, bool check_reference) {
  BenchInput in;
  in.batch = make_cross_attention_batch(rows, T, &in.stats);
  in.rows = rows, in.q_len = T, in.kv_len = T + T / 2;
  const auto twin = gpu::metadata_twin(in.batch);
  if (!twin) die("metadata_twin rejected the T=" + std::to_string(T) + " input: " + twin.error().message);
  if (check_reference) {
    const auto ref = ref::metadata(in.batch);
    if (!ref) die("ref::metadata rejected the T=" + std::to_string(T) + " input: " + ref.error().message);
    if (!(ref.value() == twin.value()))
      die("metadata_twin and ref::metadata disagree at T=" + std::to_string(T) + "; not timing a wrong answer");
  }
  int64_t valid_q = 0, non_padding_q = 0;
  for (int64_t n : twin->q_seqlens) valid_q += n;
  for (int64_t id : in.batch.q.segment_ids.data) non_padding_q += id != 0;
  in.q_trimmed = non_padding_q - valid_q;
  in.twin_scratch = gpu::metadata_twin_scratch_bytes(in.batch);
  return in;
}

std::map<int64_t, BenchInput>& inputs() {
  static std::map<int64_t, BenchInput> by_t;
  return by_t;
}

const BenchInput& input_for(int64_t T) {
  auto it = inputs().find(T);
  if (it == inputs().end()) it = inputs().emplace(T, build_checked_input(kRows, T, true)).first;
  return it->second;
}

// ---------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------

void BM_MetadataTwin(benchmark::State& state) {
  const BenchInput& in = input_for(state.range(0));
  for (auto _ : state) {
    auto md = gpu::metadata_twin(in.batch);
    benchmark::DoNotOptimize(md);
  }
  state.SetItemsProcessed(state.iterations() * in.tokens());
  state.counters["scratch_B/token"] = in.twin_scratch_per_token();
}

void BM_MetadataMaskPath(benchmark::State& state) {
  const BenchInput& in = input_for(state.range(0));
  for (auto _ : state) {
    auto md = ref::metadata(in.batch);
    benchmark::DoNotOptimize(md);
  }
  state.SetItemsProcessed(state.iterations() * in.tokens());
  // Peak scratch of the mask path per row: the [Tq, Tkv] char mask (one row alive at a time).
  state.counters["mask_B/row"] = double(in.mask_bytes_per_row());
}

BENCHMARK(BM_MetadataTwin)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MetadataMaskPath)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);
// One row's mask is 16384 x 24576 = 384 MiB; a call took 5.3 s (4 rows) on the 2-core
// x86_64 dev box. Two fixed iterations keep the whole run near 20 s there.
BENCHMARK(BM_MetadataMaskPath)->Arg(16384)->Iterations(2)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------

std::string summary_line(const CapturingReporter& reporter, int64_t T) {
  const double twin = reporter.mean_ms("BM_MetadataTwin", T);
  const double mask = reporter.mean_ms("BM_MetadataMaskPath", T);
  if (twin < 0 || mask < 0) return {};  // filtered out
  const BenchInput& in = input_for(T);
  char text[256];
  std::snprintf(text, sizeof text, "metadata T=%lld: twin %s ms, mask %s ms, speedup %.0fx, scratch %.3g B/token vs %lld B/row",
                static_cast<long long>(T), format_ms(twin).c_str(), format_ms(mask).c_str(), mask / twin,
                in.twin_scratch_per_token(), static_cast<long long>(in.mask_bytes_per_row()));
  return text;
}

// ---------------------------------------------------------------------------
// CUDA
// ---------------------------------------------------------------------------

double call_ms(const auto& call) {
  const auto start = std::chrono::steady_clock::now();
  auto md = call();
  benchmark::DoNotOptimize(md);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// metadata_cuda allocates, copies in, runs the kernels and copies out inside one call
// and exposes no stream, so the CUDA events of the kernels are out of reach from here:
// we time the whole call with a wall clock (after one warm-up call that pays for
// context creation), which is what a caller of the host entry point pays.
std::string cuda_line(const std::string& device) {
  InputStats stats;
  const PackedBatch batch = make_cross_attention_batch(kCudaRows, kCudaT, &stats);
  const auto twin = gpu::metadata_twin(batch);
  if (!twin) die("metadata_twin rejected the CUDA input: " + twin.error().message);
  const auto cuda = gpu::metadata_cuda(batch);  // warm-up and correctness check
  if (!cuda) die("metadata_cuda failed: " + cuda.error().message);
  if (!(cuda.value() == twin.value())) die("metadata_cuda and metadata_twin disagree at B=8 T=131072");
  std::vector<double> cuda_ms, twin_ms;
  for (int rep = 0; rep < kCudaReps; ++rep) cuda_ms.push_back(call_ms([&] { return gpu::metadata_cuda(batch); }));
  for (int rep = 0; rep < 5; ++rep) twin_ms.push_back(call_ms([&] { return gpu::metadata_twin(batch); }));
  const double c = median(cuda_ms), t = median(twin_ms);
  char text[384];
  std::snprintf(text, sizeof text,
                "metadata cuda B=%lld T=%lld: %s ms (median of %d, wall clock around the whole call incl. "
                "allocation and copies, %s), twin %s ms, speedup %.1fx",
                static_cast<long long>(kCudaRows), static_cast<long long>(kCudaT), format_ms(c).c_str(), kCudaReps,
                device.c_str(), format_ms(t).c_str(), t / c);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string results_dir = bench::take_results_arg(argc, argv, kProgram);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  std::vector<std::string> input_lines;
  for (int64_t T : kSizes) {  // build and check every input before anything is timed
    input_lines.push_back("T=" + std::to_string(T) + ": " + describe(input_for(T)));
    std::printf("inputs %s (twin == reference checked)\n", input_lines.back().c_str());
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
    if (device.empty()) device = "CUDA device";
    lines.push_back(cuda_line(device));
  } else {
    device.clear();
    lines.push_back("metadata cuda: skipped (no CUDA device)");
  }
  const bench::ResultsFile file{kProgram, "metadata",
                                "inputs (bench/metadata_bench.cpp, seed " + std::to_string(kSeed) +
                                    ", mask padding_causal_bottom_right)"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
