// gpu_bench.cpp: the project's CUDA kernels against cuDNN SDPA and against the
// memory system, on one device in one run (Google Benchmark tables from CUDA-event
// medians; nothing here runs without a device).
//
//   attention/{fwd,bwd}/{ours,cudnn}/L/{no_mask,causal}
//       bf16, D = 128, 16 heads, 16384 tokens in one row split into documents of
//       L = 512 .. 8192; ours = gpu::attention_on_device, cudnn = cudnn::sdpa_on_device
//       (thd, ragged offsets from the same metadata). TFLOP/s with FLOPs
//       4 * sum(L^2) * D * H forward, 2.5x that backward, halved for causal; the
//       summary line gives the ratio ours / cuDNN. Both outputs must agree (max |o|
//       difference <= 3e-2, no NaN) before anything is reported.
//   small_seq/{ours,cudnn}: 30720 documents of one query and 16 keys, H = 1, D = 128,
//       bf16 forward; ours = gpu::small_seq_on_device, cudnn = SDPA on [30720, 1, 1|16,
//       128] (bshd, s_q = 1). Time and achieved bandwidth over the bytes each must move
//       once (Q, K, V, O, plus P fp32 for ours or the LSE fp32 for cuDNN).
//   metadata/{kernels,d2d_copy}: the metadata kernels (rows, scans, compaction) on
//       B = 8 rows of T = 131072 against a device-to-device copy of their four input
//       arrays (the floor any O(T) algorithm has to beat); GB/s of the copy.
// All times are medians of kReps CUDA-event-timed passes after one checked pass.
//
// Run: scripts/bench gpu [--results DIR] [--benchmark_* flags]; without a device it
// prints `gpu: skipped (no CUDA device)` and exits 0.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attn_oracle/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "bench_support.hpp"
#if ATTN_ORACLE_BENCH_CUDA
#include "attn_oracle/gpu/attention_device.hpp"
#include "attn_oracle/gpu/metadata_device.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_plan.hpp"
#include "attn_oracle/gpu/small_seq_device.hpp"
#include "device_inputs.hpp"
#endif
#if ATTN_ORACLE_BENCH_CUDNN
#include "cudnn_sdpa.hpp"
#endif

namespace {

using namespace attn_oracle;
using bench::format_ms;

constexpr const char* kProgram = "attn_oracle_bench_gpu";
[[maybe_unused]] constexpr uint64_t kSeed = 20261122;
[[maybe_unused]] constexpr int kReps = 20;

[[noreturn]] [[maybe_unused]] void die(const std::string& message) { bench::fatal(kProgram, message); }

// One measured configuration: a Google Benchmark entry with the median as its time.
struct Measured {
  std::string name;
  double ms = 0.0;
  std::vector<std::pair<std::string, double>> counters;
};
std::vector<Measured> measured;
std::vector<std::string> lines;

// `x` with `digits` decimals.
std::string fixed(double x, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

#if ATTN_ORACLE_BENCH_CUDA
// One row of `tokens` tokens: documents 1..n of the given lengths, positions from 0.
PackedSide one_row(const std::vector<int64_t>& lengths, int64_t tokens) {
  PackedSide side;
  side.segment_ids = IntArray::filled({1, tokens}, 0);
  side.segment_pos = IntArray::filled({1, tokens}, 0);
  int64_t t = 0;
  for (size_t d = 0; d < lengths.size(); ++d)
    for (int64_t p = 0; p < lengths[d]; ++p, ++t)
      side.segment_ids.data[t] = int64_t(d) + 1, side.segment_pos.data[t] = p;
  return side;
}

// ---------------------------------------------------------------------------
// Fused attention: ours against cuDNN SDPA
// ---------------------------------------------------------------------------

constexpr int64_t kTokens = 16384;
constexpr int64_t kLengths[] = {512, 1024, 2048, 4096, 8192};
constexpr int kHeads = 16, kDim = 128;

void attention_pair(int64_t L, bool causal) {
  const int64_t docs = kTokens / L;
  PackedBatch batch;
  batch.mask = causal ? MaskKind::causal : MaskKind::no_mask;
  batch.max_segments = docs;
  batch.q = one_row(std::vector<int64_t>(docs, L), kTokens);
  batch.kv = batch.q;
  const Expected<Metadata> md = gpu::metadata_twin(batch);
  if (!md) die("metadata_twin rejected the attention input: " + md.error().message);
  const gpu::DeviceAttentionInputs in =
      bench::bf16_attention_inputs(md.value(), batch.mask, kHeads, kDim, kSeed, kReps);
  gpu::DeviceAttentionOutputs ours;
  if (!gpu::attention_on_device(in, ours)) die("attention_on_device failed: " + ours.failure);

  const double flops = 4.0 * double(docs) * double(L) * double(L) * kDim * kHeads * (causal ? 0.5 : 1.0);
  const std::string tag = std::to_string(L) + "/" + (causal ? "causal" : "no_mask");
  auto tflops = [](double f, double ms) { return f / (ms * 1e9); };
  measured.push_back({"attention/fwd/ours/" + tag, ours.fwd_ms, {{"TFLOP/s", tflops(flops, ours.fwd_ms)}}});
  measured.push_back({"attention/bwd/ours/" + tag, ours.bwd_ms, {{"TFLOP/s", tflops(2.5 * flops, ours.bwd_ms)}}});
  std::string line = "attention bf16 D=128 H=16 L=" + std::to_string(L) + " x " + std::to_string(docs) + " docs " +
                     (causal ? "causal" : "no_mask") + ": ours fwd " + fixed(tflops(flops, ours.fwd_ms), 1) +
                     " TFLOP/s (" + format_ms(ours.fwd_ms) + " ms), bwd " + fixed(tflops(2.5 * flops, ours.bwd_ms), 1) +
                     " TFLOP/s (" + format_ms(ours.bwd_ms) + " ms)";
#if ATTN_ORACLE_BENCH_CUDNN
  cudnn::SdpaCall call;
  call.plan = cudnn::make_plan(md.value(), 1, kTokens, kTokens);
  call.shape = AttentionShape{kHeads, kHeads, kDim, std::nullopt, Dtype::bf16, true};
  call.band = cudnn::band_for(batch.mask, Window{});
  call.q = in.q, call.k = in.k, call.v = in.v, call.d_o = in.d_o;
  call.timing_reps = kReps;
  cudnn::SdpaOutputs theirs;
  if (!cudnn::sdpa_on_device(call, theirs)) die("cuDNN SDPA failed: " + theirs.failure);
  double diff = 0.0;
  for (size_t i = 0; i < ours.o.size(); ++i) {
    const double a = gpu::from_storage_bits(ours.o[i], gpu::kBf16), b = gpu::from_storage_bits(theirs.o[i], gpu::kBf16);
    diff = std::max(diff, std::isnan(a) || std::isnan(b) ? INFINITY : std::fabs(a - b));
  }
  if (diff > 3e-2) die("ours and cuDNN disagree on o (max |diff| " + std::to_string(diff) + "); not timing");
  measured.push_back({"attention/fwd/cudnn/" + tag, theirs.fwd_ms, {{"TFLOP/s", tflops(flops, theirs.fwd_ms)}}});
  measured.push_back({"attention/bwd/cudnn/" + tag, theirs.bwd_ms, {{"TFLOP/s", tflops(2.5 * flops, theirs.bwd_ms)}}});
  // ratio = cuDNN time / our time: above 1 means ours is faster.
  line += "; cuDNN fwd " + fixed(tflops(flops, theirs.fwd_ms), 1) + " (" + format_ms(theirs.fwd_ms) + " ms), bwd " +
          fixed(tflops(2.5 * flops, theirs.bwd_ms), 1) + " (" + format_ms(theirs.bwd_ms) + " ms); speed ours/cuDNN fwd " +
          fixed(theirs.fwd_ms / ours.fwd_ms, 2) + "x, bwd " + fixed(theirs.bwd_ms / ours.bwd_ms, 2) + "x";
#else
  line += "; cuDNN: not in this build";
#endif
  lines.push_back(line);
}

// ---------------------------------------------------------------------------
// Small-seq: our kernel against cuDNN SDPA with one query per document
// ---------------------------------------------------------------------------

constexpr int64_t kSmallDocs = 30720, kDocsPerRow = 32, kKeys = 16, kSmallDim = 128;

void small_seq_pair() {
  const AttentionProblem problem = bench::small_seq_problem(kSmallDocs, kDocsPerRow, kKeys, kSmallDim);
  const AttentionInputs inputs = generate_inputs(problem, kSeed);
  auto plan = gpu::plan_small_seq(problem, inputs);
  if (!plan) die("plan_small_seq rejected the input: " + plan.error().message);
  gpu::DeviceSmallSeqInputs d;
  d.params = gpu::small_seq_shape_params(problem, plan.value());
  d.max_keys = plan->max_keys;
  d.q_token = plan->q_token, d.first_key = plan->first_key, d.q_pos = plan->q_pos;
  d.keys = plan->keys, d.kv_pos = plan->kv_pos;
  for (auto [from, to] : {std::pair{&inputs.q, &d.q}, std::pair{&inputs.k, &d.k}, std::pair{&inputs.v, &d.v}})
    for (double x : *from) to->push_back(gpu::to_storage_bits(static_cast<float>(x), gpu::kBf16));
  d.timing_reps = kReps;
  gpu::DeviceSmallSeqOutputs ours;
  if (!gpu::small_seq_on_device(d, ours)) die("small_seq_on_device failed: " + ours.failure);
  // Q, K, V, O in bf16 moved once, plus P [docs, 16] fp32 for ours.
  const double qkvo = 2.0 * (2.0 * kSmallDocs * kSmallDim + 2.0 * kSmallDocs * kKeys * kSmallDim);
  const double ours_bytes = qkvo + 4.0 * kSmallDocs * 16;
  measured.push_back({"small_seq/ours", ours.fwd_ms, {{"GB/s", ours_bytes / (ours.fwd_ms * 1e6)}}});
  std::string line = "small_seq docs=30720 keys=16 D=128 bf16 fwd: ours " + format_ms(ours.fwd_ms) + " ms, " +
                     fixed(ours_bytes / (ours.fwd_ms * 1e6), 0) + " GB/s";
#if ATTN_ORACLE_BENCH_CUDNN
  // The same memory as cuDNN's bshd [30720, H, 1 | 16, D]: document d's query is token
  // d, its keys tokens 16d .. 16d + 15 (rows of 32 documents are contiguous).
  cudnn::SdpaCall call;
  cudnn::Plan& pl = call.plan;
  pl.layout = cudnn::Layout::bshd;
  pl.docs = kSmallDocs, pl.s_max_q = 1, pl.s_max_kv = kKeys;
  pl.total_q = kSmallDocs, pl.total_kv = kSmallDocs * kKeys;
  pl.seq_len_q.assign(kSmallDocs, 1), pl.seq_len_kv.assign(kSmallDocs, int32_t(kKeys));
  for (int64_t i = 0; i <= kSmallDocs; ++i) pl.token_offset_q.push_back(i), pl.token_offset_kv.push_back(i * kKeys);
  call.shape = problem.shape;
  call.band = cudnn::band_for(MaskKind::padding, Window{});
  call.q = d.q, call.k = d.k, call.v = d.v;
  call.timing_reps = kReps;
  cudnn::SdpaOutputs theirs;
  if (!cudnn::sdpa_on_device(call, theirs)) die("cuDNN SDPA failed on the small-seq input: " + theirs.failure);
  double diff = 0.0;
  for (size_t i = 0; i < ours.o.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(gpu::from_storage_bits(ours.o[i], gpu::kBf16) -
                                    gpu::from_storage_bits(theirs.o[i], gpu::kBf16))));
  if (!(diff <= 3e-2)) die("small-seq kernel and cuDNN disagree on o (max |diff| " + std::to_string(diff) + ")");
  const double cudnn_bytes = qkvo + 4.0 * kSmallDocs;  // the LSE instead of P
  measured.push_back({"small_seq/cudnn", theirs.fwd_ms, {{"GB/s", cudnn_bytes / (theirs.fwd_ms * 1e6)}}});
  line += "; cuDNN " + format_ms(theirs.fwd_ms) + " ms, " + fixed(cudnn_bytes / (theirs.fwd_ms * 1e6), 0) +
          " GB/s; speed ours/cuDNN " + fixed(theirs.fwd_ms / ours.fwd_ms, 2) + "x";
#else
  line += "; cuDNN: not in this build";
#endif
  lines.push_back(line);
}

// ---------------------------------------------------------------------------
// Metadata kernels against a device-to-device copy of their inputs
// ---------------------------------------------------------------------------

constexpr int64_t kMetaRows = 8, kMetaT = 131072, kMetaDocs = 8;

void metadata_pair() {
  PackedBatch batch;
  batch.mask = MaskKind::padding_causal;
  batch.max_segments = kMetaDocs;
  // 8 documents of 15000 tokens per row, the rest padding.
  const PackedSide row = one_row(std::vector<int64_t>(kMetaDocs, 15000), kMetaT);
  batch.q.segment_ids = IntArray::filled({kMetaRows, kMetaT}, 0);
  batch.q.segment_pos = IntArray::filled({kMetaRows, kMetaT}, 0);
  for (int64_t r = 0; r < kMetaRows; ++r)
    for (int64_t t = 0; t < kMetaT; ++t)
      batch.q.segment_ids.data[r * kMetaT + t] = row.segment_ids.data[t],
      batch.q.segment_pos.data[r * kMetaT + t] = row.segment_pos.data[t];
  batch.kv = batch.q;
  auto prepared = gpu::prepare_batch(batch);
  if (!prepared) die("prepare_batch rejected the metadata input: " + prepared.error().message);
  const gpu::InputSizes sizes{batch.q.segment_ids.data.size(), batch.q.segment_pos.data.size(),
                              batch.kv.segment_ids.data.size(), batch.kv.segment_pos.data.size()};
  gpu::DeviceMetadataOutputs out;
  if (!gpu::metadata_on_device(prepared->params, sizes, out, kReps)) die("metadata_on_device failed: " + out.failure);
  const Expected<Metadata> twin = gpu::metadata_twin(batch);
  if (!twin || out.cu_seqlens_q != twin->cu_seqlens_q || out.ragged_offsets_kv != twin->ragged_offsets_kv)
    die("the metadata kernels and the twin disagree; not timing");
  measured.push_back({"metadata/kernels", out.kernels_ms, {}});
  measured.push_back({"metadata/d2d_copy", out.copy_ms, {{"GB/s", out.copy_bytes / (out.copy_ms * 1e6)}}});
  lines.push_back("metadata B=8 T=131072 M=8: kernels " + format_ms(out.kernels_ms) + " ms, device-to-device copy of "
                  "the inputs " + format_ms(out.copy_ms) + " ms (" + fixed(out.copy_bytes / (out.copy_ms * 1e6), 0) +
                  " GB/s read + written); kernels / copy " + fixed(out.kernels_ms / out.copy_ms, 2) + "x");
}
#endif

void register_measured() {
  for (const Measured& m : measured) {
    const double seconds = m.ms / 1e3;
    const auto counters = m.counters;
    benchmark::RegisterBenchmark(m.name.c_str(), [seconds, counters](benchmark::State& state) {
      for (auto _ : state) state.SetIterationTime(seconds);
      for (const auto& [name, value] : counters) state.counters[name] = value;
    })->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string results_dir = bench::take_results_arg(argc, argv, kProgram);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::string device;
  if (!gpu::cuda_available(&device)) {
    std::printf("gpu: skipped (no CUDA device)\n");
    return 0;
  }
#if ATTN_ORACLE_BENCH_CUDA
  for (int64_t L : kLengths)
    for (bool causal : {false, true}) attention_pair(L, causal);
  small_seq_pair();
  metadata_pair();
#else
  lines.push_back("gpu: skipped (this build has no CUDA)");
#endif
  register_measured();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  lines.push_back("times: medians of " + std::to_string(kReps) + " CUDA-event-timed passes after one checked pass, " +
                  "copies excluded, " + device);
  const bench::ResultsFile file{kProgram, "gpu", "inputs (bench/gpu_bench.cpp, seed " + std::to_string(kSeed) + ")"};
  const std::vector<std::string> input_lines{
      "attention: bf16, D=128, H=16, 16384 tokens in one row as documents of L = 512..8192, no_mask and causal",
      "small_seq: 30720 documents x (1 query, 16 keys), H=1, D=128, bf16 forward",
      "metadata: B=8, T=131072, 8 documents of 15000 tokens per row, padding_causal"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
