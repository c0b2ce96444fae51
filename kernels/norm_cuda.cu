// Kernels of kernels/norm_cuda. Block reductions use a fixed shared-memory tree, so a row's result
// depends only on the row.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/block_reduce.cuh"
#include "kernels/norm_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;


__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight, int64_t n, float eps,
                              float* out) {
  __shared__ float scratch[kThreads];
  const float* row = x + blockIdx.x * n;  // [n]
  float* out_row = out + blockIdx.x * n;  // [n]
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum_sq = fmaf(row[i], row[i], sum_sq);
  const float inv_rms = rsqrtf(BlockSum<kThreads>(sum_sq, scratch) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out_row[i] = weight[i] * (row[i] * inv_rms);
}

__global__ void LayerNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                                const float* __restrict__ bias, int64_t n, float eps, float* out) {
  __shared__ float scratch[kThreads];
  const float* row = x + blockIdx.x * n;  // [n]
  float* out_row = out + blockIdx.x * n;  // [n]
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += row[i];
  const float mean = BlockSum<kThreads>(sum, scratch) / static_cast<float>(n);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float d = row[i] - mean;
    sum_sq = fmaf(d, d, sum_sq);
  }
  const float inv_std = rsqrtf(BlockSum<kThreads>(sum_sq, scratch) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out_row[i] = (row[i] - mean) * inv_std * weight[i] + bias[i];
}

__global__ void AddInPlaceKernel(const float* __restrict__ x, int64_t n, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void SiluMulKernel(const float* __restrict__ gate_up, int64_t rows, int64_t n, float* __restrict__ out) {
  const int64_t total = rows * n;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t / n;
    const int64_t i = t % n;
    const float g = gate_up[r * 2 * n + i];
    const float u = gate_up[r * 2 * n + n + i];
    out[t] = g / (1.0f + __expf(-g)) * u;
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

cudaError_t RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out,
                    cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, n, eps, out);
  return cudaGetLastError();
}

cudaError_t LayerNorm(const float* x, const float* weight, const float* bias, int64_t rows, int64_t n, float eps,
                      float* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  LayerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, bias, n, eps, out);
  return cudaGetLastError();
}

cudaError_t AddInPlace(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AddInPlaceKernel<<<GridFor(n), kThreads, 0, stream>>>(x, n, y);
  return cudaGetLastError();
}

cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t n, float* out, cudaStream_t stream) {
  if (rows * n <= 0) return cudaSuccess;
  SiluMulKernel<<<GridFor(rows * n), kThreads, 0, stream>>>(gate_up, rows, n, out);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
