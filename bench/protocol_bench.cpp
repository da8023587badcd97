// protocol_bench.cpp: what a call through the worker protocol (docs/protocol.md)
// costs, measured with Google Benchmark on small metadata cases.
//
//   BM_Metadata/worker     the metadata of each case through a persistent NumPy
//                          worker (examples/numpy_backend.py): encode, pipe, decode,
//                          the NumPy computation, and back.
//   BM_Metadata/reference  the same cases on the C++ `reference` backend (the
//                          explicit-mask float64 oracle), in the same process.
//
// Cases (make_cases below, deterministic): 64 batches of one row, T = 8..23 tokens a
// side, 1..3 documents with padding between and after them, mask padding, M = 4: the
// size of most drawn metadata cases. Both backends must give identical Metadata for
// every case before anything is timed (the process aborts otherwise).
//
// Run: scripts/bench protocol [--benchmark_* flags]; prints cases/s of each and the
// ratio. ATTN_ORACLE_BENCH_WORKER overrides the worker command.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/seam/process_backend.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/model/environment.hpp"

namespace {

using namespace attn_oracle;

std::vector<PackedBatch> make_cases() {
  std::mt19937_64 rng(20261123);
  std::vector<PackedBatch> out;
  for (int c = 0; c < 64; ++c) {
    const int64_t t = 8 + c % 16;
    std::vector<int64_t> ids, pos;
    for (int64_t doc = 1; doc <= 1 + c % 3 && static_cast<int64_t>(ids.size()) < t; ++doc) {
      const int64_t len = 1 + static_cast<int64_t>(rng() % 4);
      for (int64_t i = 0; i < len && static_cast<int64_t>(ids.size()) < t; ++i) ids.push_back(doc), pos.push_back(i);
      if (static_cast<int64_t>(ids.size()) < t) ids.push_back(0), pos.push_back(0);
    }
    while (static_cast<int64_t>(ids.size()) < t) ids.push_back(0), pos.push_back(0);
    PackedSide side{IntArray({1, t}, ids), IntArray({1, t}, pos)};
    out.push_back(PackedBatch{side, side, MaskKind::padding, Window{}, 4});
  }
  return out;
}

std::string worker_command() {
  return environment_value(read_environment(), "ATTN_ORACLE_BENCH_WORKER",
                           "PYTHONPATH=" ATTN_ORACLE_SOURCE_DIR "/python:" ATTN_ORACLE_SOURCE_DIR
                           " python3 -m attn_oracle.worker examples.numpy_backend:Backend");
}

std::map<std::string, double> cases_per_second;

void BM_Metadata(benchmark::State& state, std::string which) {
  const std::vector<PackedBatch> cases = make_cases();
  std::unique_ptr<Backend> backend =
      which == "worker" ? make_process_backend(worker_command()) : BackendRegistry::instance().make("reference");
  std::unique_ptr<Backend> reference = BackendRegistry::instance().make("reference");
  for (const PackedBatch& b : cases)  // the same answers before any timing
    if (!(backend->metadata()->metadata(b).value() == reference->metadata()->metadata(b).value())) {
      std::fprintf(stderr, "protocol_bench: %s and reference disagree on a case\n", which.c_str());
      std::exit(1);
    }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(backend->metadata()->metadata(cases[i++ % cases.size()]));
  state.SetItemsProcessed(state.iterations());
  state.counters["cases/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  register_reference_backend();
  benchmark::RegisterBenchmark("BM_Metadata/worker", BM_Metadata, std::string("worker"))->MinTime(2.0)->UseRealTime();
  benchmark::RegisterBenchmark("BM_Metadata/reference", BM_Metadata, std::string("reference"))->MinTime(2.0)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  struct Capture : benchmark::ConsoleReporter {
    void ReportRuns(const std::vector<Run>& runs) override {
      for (const Run& r : runs) cases_per_second[r.benchmark_name()] = r.counters.at("cases/s");
      ConsoleReporter::ReportRuns(runs);
    }
  } reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const double worker = cases_per_second["BM_Metadata/worker/min_time:2.000/real_time"];
  const double reference = cases_per_second["BM_Metadata/reference/min_time:2.000/real_time"];
  if (worker > 0 && reference > 0)
    std::printf("metadata, small cases: NumPy worker %.0f cases/s, C++ reference %.0f cases/s, reference / worker %.1fx\n",
                worker, reference, reference / worker);
  return 0;
}
