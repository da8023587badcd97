// event_timer.cuh: kernel timing with CUDA events, shared by the kernels' host
// sides for the benchmarks (copies excluded: only what `pass` launches is timed).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace attn_oracle::gpu {

// Median CUDA-event time of `reps` runs of `pass` (events on `stream`); < 0 when a run failed.
template <class Pass>
float median_event_ms(int reps, Pass&& pass, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(start, stream);
    if (!pass()) break;
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (int(ms.size()) != reps) return -1.0f;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace attn_oracle::gpu
