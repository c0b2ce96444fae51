// Block-wide reductions for kernels launched with kThreads threads per block (a power of two).
// The sum runs one fixed shared-memory tree, so its result depends only on the inputs, never on
// timing: the basis of the row-count-invariant kernels. `scratch` holds kThreads floats.
#pragma once

#include <cuda_runtime.h>

namespace mtpspec::cuda::launch {

// Σ v over the block; every thread gets the result.
template <int kThreads>
__device__ float BlockSum(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();
  return total;
}

// max v over the block (exact in any order); every thread gets the result.
template <int kThreads>
__device__ float BlockMax(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();
  return total;
}

}  // namespace mtpspec::cuda::launch
