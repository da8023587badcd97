// hd.hpp: ATTN_HD marks the functions a CUDA kernel and its CPU twin share.
// Under nvcc they are __host__ __device__ __forceinline__; under g++ plain inline.
// Shared functions never read threadIdx: only __global__ kernels map work to threads.
#pragma once

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif
