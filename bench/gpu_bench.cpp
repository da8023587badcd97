// gpu_bench.cpp: the project's CUDA kernels against cuDNN SDPA and against the
// memory system, on one device in one run (Google Benchmark tables from CUDA-event
// medians; nothing here runs without a device). Metadata first, then attention.
//
//   metadata/{cuda,cuda_graph,d2d_copy}/SHAPE: the token-parallel kernels of `cuda`
//       (enqueued on a stream, and replayed as a CUDA graph) and a device-to-device
//       copy of the four input arrays (the floor for reading each input once), at
//       1 x 2^20 tokens, 8 x 131072 with 8 and with 1024 documents a row, and
//       4096 x 256 (2 documents a row), mask padding_causal; the kernels must equal
//       the twin before anything is timed.
//   attention/{fwd,bwd}/{cuda,cudnn}/D/L/{no_mask,causal}: bf16, 16 heads,
//       (and attention/{fwd,bwd}/cuda-sm90/... on an sm_90 device: Hopper's kernels),
//       16384 tokens in one row split into documents of L = 512 .. 16384, head dims
//       64, 128, 256. cuda = the tensor-core (CuTe) kernels of `cuda`, forward and
//       deterministic backward (delta, dK/dV, dQ: no atomics); cudnn =
//       cudnn::sdpa_on_device on the same metadata. TFLOP/s with FLOPs
//       4 * sum(L^2) * D * H forward, 2.5x that backward, halved for causal; the
//       summary line gives ratios to cuDNN (its time over ours: above 1 is faster)
//       and the fraction of the bf16 dense peak of the datasheet (989 TFLOP/s for
//       H100 / H200 SXM). Every output checked
//       against cuDNN's before it is reported: max |difference| <= 3e-2 for o, and
//       for dq, dk, dv relative to their largest magnitude (no NaN anywhere).
//   small_seq/{ours,cudnn}: 30720 documents of one query and 16 keys, H = 1, D = 128,
//       bf16 forward, as before.
// All times are medians of CUDA-event-timed passes after one checked pass.
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
#include <utility>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/metadata.hpp"
#include "bench_support.hpp"
#if ATTN_ORACLE_BENCH_CUDA
#include "attn_oracle/gpu/attention.hpp"
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
[[maybe_unused]] constexpr int kReps = 10;

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
// Fused attention: the tensor-core kernels against cuDNN SDPA
// ---------------------------------------------------------------------------

constexpr int64_t kTokens = 16384;
constexpr int64_t kLengths[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kHeads = 16;

// The datasheet's dense bf16 rate of the chip, 0 when unknown.
double peak_tflops(const std::string& device) {
  return device.find("H100") != std::string::npos || device.find("H200") != std::string::npos ? 989.4 : 0.0;
}

double tflops(double flops, double ms) { return flops / (ms * 1e9); }

double max_abs_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = gpu::from_storage_bits(a[i], gpu::kBf16), y = gpu::from_storage_bits(b[i], gpu::kBf16);
    diff = std::max(diff, std::isnan(x) || std::isnan(y) ? INFINITY : std::fabs(x - y));
  }
  return diff;
}

// The largest |x| of a bf16 tensor (the scale a gradient's difference is judged on).
double max_abs(const std::vector<uint16_t>& a) {
  double m = 0.0;
  for (uint16_t x : a) m = std::max(m, double(std::fabs(gpu::from_storage_bits(x, gpu::kBf16))));
  return m;
}

// Our dq, dk, dv against another implementation's: max |difference| within 3e-2 of
// the larger tensor's largest |x| (a bf16 sum over thousands of keys); empty when
// all three agree, else the first that does not and by how much.
std::string gradients_disagreement(const gpu::DeviceAttentionOutputs& ours, const std::vector<uint16_t>& dq,
                                   const std::vector<uint16_t>& dk, const std::vector<uint16_t>& dv) {
  const std::pair<const char*, std::pair<const std::vector<uint16_t>*, const std::vector<uint16_t>*>> grads[] = {
      {"dq", {&ours.dq, &dq}}, {"dk", {&ours.dk, &dk}}, {"dv", {&ours.dv, &dv}}};
  for (const auto& [name, pair] : grads) {
    const double bound = 3e-2 * std::max({max_abs(*pair.first), max_abs(*pair.second), 1e-3});
    const double diff = max_abs_diff(*pair.first, *pair.second);
    if (!(diff <= bound))
      return std::string(name) + " (max |diff| " + std::to_string(diff) + ", bound " + std::to_string(bound) + ")";
  }
  return "";
}

// The same, fatal: a number is not reported against disagreeing gradients.
void check_gradients(const gpu::DeviceAttentionOutputs& ours, const std::vector<uint16_t>& dq,
                     const std::vector<uint16_t>& dk, const std::vector<uint16_t>& dv, const std::string& other,
                     const std::string& tag) {
  const std::string disagreement = gradients_disagreement(ours, dq, dk, dv);
  if (!disagreement.empty()) die("cuda and " + other + " disagree on " + disagreement + " at " + tag + "; not timing");
}

// Hopper's kernels (cuda-sm90) on the same input, where the device runs them: timed,
// o and the gradients checked against the SM80 kernels' (gradients_disagreement). A
// failure is reported in the line, not fatal: the other measurements still stand.
std::string hopper_kernels(gpu::DeviceAttentionInputs in, const gpu::DeviceAttentionOutputs& ours, double flops,
                           const std::string& tag) {
  if (!gpu::attention_cuda_sm90_available()) return "";
  in.arch = gpu::FlashArch::sm90;
  gpu::DeviceAttentionOutputs hopper;
  if (!gpu::attention_on_device(in, hopper)) return "; cuda-sm90 FAILED: " + hopper.failure;
  std::string line;
  if (hopper.forward_arch == gpu::FlashArch::sm90) {
    const double diff = max_abs_diff(ours.o, hopper.o);
    if (!(diff <= 3e-2)) return "; cuda-sm90 DISAGREES with cuda on o (max |diff| " + std::to_string(diff) + ")";
    measured.push_back({"attention/fwd/cuda-sm90/" + tag, hopper.fwd_ms, {{"TFLOP/s", tflops(flops, hopper.fwd_ms)}}});
    line += "; cuda-sm90 fwd " + fixed(tflops(flops, hopper.fwd_ms), 1) + " TFLOP/s (" + format_ms(hopper.fwd_ms) +
            " ms, " + fixed(ours.fwd_ms / hopper.fwd_ms, 2) + "x cuda)";
  }
  if (in.backward && hopper.backward_arch == gpu::FlashArch::sm90) {
    const std::string disagreement = gradients_disagreement(ours, hopper.dq, hopper.dk, hopper.dv);
    if (!disagreement.empty()) return line + "; cuda-sm90 DISAGREES with cuda on " + disagreement;
    measured.push_back(
        {"attention/bwd/cuda-sm90/" + tag, hopper.bwd_ms, {{"TFLOP/s", tflops(2.5 * flops, hopper.bwd_ms)}}});
    line += ", bwd " + fixed(tflops(2.5 * flops, hopper.bwd_ms), 1) + " TFLOP/s (" + format_ms(hopper.bwd_ms) +
            " ms, " + fixed(ours.bwd_ms / hopper.bwd_ms, 2) + "x cuda)";
  }
  return line;
}

void attention_case(int D, int64_t L, bool causal, const std::string& device) {
  const int64_t docs = kTokens / L;
  PackedBatch batch;
  batch.mask = causal ? MaskKind::causal : MaskKind::no_mask;
  batch.max_segments = docs;
  batch.q = one_row(std::vector<int64_t>(docs, L), kTokens);
  batch.kv = batch.q;
  const Expected<Metadata> md = gpu::metadata_twin(batch);
  if (!md) die("metadata_twin rejected the attention input: " + md.error().message);
  const double flops = 4.0 * double(docs) * double(L) * double(L) * D * kHeads * (causal ? 0.5 : 1.0);
  const std::string tag = std::to_string(D) + "/" + std::to_string(L) + "/" + (causal ? "causal" : "no_mask");
  const double peak = peak_tflops(device);

  gpu::DeviceAttentionInputs in = bench::bf16_attention_inputs(md.value(), batch.mask, kHeads, D, kSeed, kReps);
  gpu::DeviceAttentionOutputs ours;
  if (!gpu::attention_on_device(in, ours)) die("attention_on_device failed: " + ours.failure);
  measured.push_back({"attention/fwd/cuda/" + tag, ours.fwd_ms, {{"TFLOP/s", tflops(flops, ours.fwd_ms)}}});
  std::string line = "attention bf16 D=" + std::to_string(D) + " H=16 L=" + std::to_string(L) + " x " +
                     std::to_string(docs) + " docs " + (causal ? "causal" : "no_mask") + ": cuda fwd " +
                     fixed(tflops(flops, ours.fwd_ms), 1) + " TFLOP/s (" + format_ms(ours.fwd_ms) + " ms" +
                     (peak > 0 ? ", " + fixed(tflops(flops, ours.fwd_ms) / peak, 3) + " of peak" : std::string()) +
                     "), bwd " + fixed(tflops(2.5 * flops, ours.bwd_ms), 1) + " TFLOP/s (" +
                     format_ms(ours.bwd_ms) + " ms)";
  measured.push_back({"attention/bwd/cuda/" + tag, ours.bwd_ms, {{"TFLOP/s", tflops(2.5 * flops, ours.bwd_ms)}}});
  line += hopper_kernels(in, ours, flops, tag);
#if ATTN_ORACLE_BENCH_CUDNN
  cudnn::SdpaCall call;
  call.plan = cudnn::make_plan(md.value(), 1, kTokens, kTokens);
  call.shape = AttentionShape{kHeads, kHeads, D, std::nullopt, Dtype::bf16, true};
  call.band = cudnn::band_for(batch.mask, Window{});
  call.q = in.q, call.k = in.k, call.v = in.v, call.d_o = in.d_o;
  call.timing_reps = kReps;
  cudnn::SdpaOutputs theirs;
  if (!cudnn::sdpa_on_device(call, theirs)) die("cuDNN SDPA failed: " + theirs.failure);
  const double diff = max_abs_diff(ours.o, theirs.o);
  if (!(diff <= 3e-2)) die("cuda and cuDNN disagree on o at " + tag + " (max |diff| " + std::to_string(diff) + ")");
  check_gradients(ours, theirs.dq, theirs.dk, theirs.dv, "cuDNN", tag);
  measured.push_back({"attention/fwd/cudnn/" + tag, theirs.fwd_ms, {{"TFLOP/s", tflops(flops, theirs.fwd_ms)}}});
  measured.push_back({"attention/bwd/cudnn/" + tag, theirs.bwd_ms, {{"TFLOP/s", tflops(2.5 * flops, theirs.bwd_ms)}}});
  line += "; cuDNN fwd " + fixed(tflops(flops, theirs.fwd_ms), 1) + " (" + format_ms(theirs.fwd_ms) + " ms), bwd " +
          fixed(tflops(2.5 * flops, theirs.bwd_ms), 1) + " (" + format_ms(theirs.bwd_ms) +
          " ms); speed cuda/cuDNN fwd " + fixed(theirs.fwd_ms / ours.fwd_ms, 2) + "x, bwd " +
          fixed(theirs.bwd_ms / ours.bwd_ms, 2) + "x";
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

struct MetadataShape {
  const char* tag;
  int64_t rows, tokens, docs_per_row, doc_length;  // documents from token 0, the rest padding
};
constexpr MetadataShape kMetadataShapes[] = {{"1x1048576", 1, 1 << 20, 8, 120000},
                                             {"8x131072_8docs", 8, 131072, 8, 15000},
                                             {"8x131072_1024docs", 8, 131072, 1024, 120},
                                             {"4096x256", 4096, 256, 2, 120}};

void metadata_case(const MetadataShape& shape) {
  PackedBatch batch;
  batch.mask = MaskKind::padding_causal;
  batch.max_segments = shape.docs_per_row;
  const PackedSide row = one_row(std::vector<int64_t>(shape.docs_per_row, shape.doc_length), shape.tokens);
  batch.q.segment_ids = IntArray::filled({shape.rows, shape.tokens}, 0);
  batch.q.segment_pos = IntArray::filled({shape.rows, shape.tokens}, 0);
  for (int64_t r = 0; r < shape.rows; ++r)
    for (int64_t t = 0; t < shape.tokens; ++t)
      batch.q.segment_ids.data[r * shape.tokens + t] = row.segment_ids.data[t],
      batch.q.segment_pos.data[r * shape.tokens + t] = row.segment_pos.data[t];
  batch.kv = batch.q;
  auto prepared = gpu::prepare_batch(batch);
  if (!prepared) die("prepare_batch rejected the metadata input: " + prepared.error().message);
  const gpu::InputSizes sizes{batch.q.segment_ids.data.size(), batch.q.segment_pos.data.size(),
                              batch.kv.segment_ids.data.size(), batch.kv.segment_pos.data.size()};
  const Expected<Metadata> twin = gpu::metadata_twin(batch);
  if (!twin) die("the twin rejected the metadata input: " + twin.error().message);
  auto same = [&](const gpu::DeviceMetadataOutputs& out) {
    return out.error_row < 0 && out.q_seqlens == twin->q_seqlens && out.q_offsets == twin->q_offsets &&
           out.cu_seqlens_q == twin->cu_seqlens_q && out.cu_seqlens_kv == twin->cu_seqlens_kv &&
           out.ragged_offsets_q == twin->ragged_offsets_q && out.ragged_offsets_kv == twin->ragged_offsets_kv;
  };
  gpu::DeviceMetadataOutputs cuda;
  if (!gpu::metadata_stream_on_device(prepared->params, sizes, cuda, kReps))
    die("metadata_stream_on_device failed: " + cuda.failure);
  if (!same(cuda)) die(std::string("the kernels and the twin disagree at ") + shape.tag + "; not timing");
  const std::string tag = shape.tag;
  const double gbs = cuda.copy_bytes / (cuda.copy_ms * 1e6);
  measured.push_back({"metadata/cuda/" + tag, cuda.kernels_ms, {}});
  measured.push_back({"metadata/cuda_graph/" + tag, cuda.graph_ms, {}});
  measured.push_back({"metadata/d2d_copy/" + tag, cuda.copy_ms, {{"GB/s", gbs}}});
  lines.push_back("metadata " + tag + " (" + std::to_string(shape.docs_per_row) + " docs a row): kernels " +
                  format_ms(cuda.kernels_ms) + " ms (graph " + format_ms(cuda.graph_ms) +
                  " ms), device-to-device copy of the inputs " + format_ms(cuda.copy_ms) + " ms (" + fixed(gbs, 0) +
                  " GB/s read + written); kernels / copy " + fixed(cuda.kernels_ms / cuda.copy_ms, 2) + "x (graph " +
                  fixed(cuda.graph_ms / cuda.copy_ms, 2) + "x)");
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
  for (const MetadataShape& shape : kMetadataShapes) metadata_case(shape);
  for (int D : kHeadDims)
    for (int64_t L : kLengths)
      for (bool causal : {false, true}) attention_case(D, L, causal, device);
  small_seq_pair();
#else
  lines.push_back("gpu: skipped (this build has no CUDA)");
#endif
  register_measured();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  lines.push_back("times: medians of " + std::to_string(kReps) +
                  " CUDA-event-timed passes after one checked pass, host copies excluded, " + device);
  const bench::ResultsFile file{kProgram, "gpu", "inputs (bench/gpu_bench.cpp, seed " + std::to_string(kSeed) + ")"};
  const std::vector<std::string> input_lines{
      "metadata: padding_causal; 1 x 2^20 (8 documents of 120000), 8 x 131072 (8 of 15000; 1024 of 120), "
      "4096 x 256 (2 of 120) tokens, the rest of each row padding",
      "attention: bf16, D = 64 / 128 / 256, H=16, 16384 tokens in one row as documents of L = 512..16384, no_mask "
      "and causal",
      "small_seq: 30720 documents x (1 query, 16 keys), H=1, D=128, bf16 forward"};
  bench::print_summary(file, results_dir, device, input_lines, lines);
  return 0;
}
