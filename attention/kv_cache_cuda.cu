// Kernels of attention/kv_cache_cuda: kv_a_layernorm + cache store (f32 or int8 with per-token
// scale). One block per row; the sum of squares uses a fixed shared-memory tree, so a token's
// stored latent depends only on that token.
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kv_cache_cuda_launch.h"
#include "core/block_reduce.cuh"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;


__global__ void NormStoreLatentKernel(const float* __restrict__ kv, int64_t kv_stride, int64_t n,
                                      const float* __restrict__ weight, float eps, float* latent_f32,
                                      int8_t* latent_i8, float* scale, int64_t first_slot) {
  __shared__ float scratch[kThreads];
  const int64_t r = blockIdx.x;
  const int64_t slot = first_slot + r;
  const float* row = kv + r * kv_stride;  // [n] latent part of the row
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum_sq = fmaf(row[i], row[i], sum_sq);
  const float inv_rms = 1.0f / sqrtf(BlockSum<kThreads>(sum_sq, scratch) / static_cast<float>(n) + eps);
  if (latent_i8 == nullptr) {
    float* dst = latent_f32 + slot * n;  // [n]
    for (int64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = weight[i] * (row[i] * inv_rms);
    return;
  }
  // int8: symmetric, scale = max|c| / 127 (1 when c = 0), q = rint(clamp(c / scale, ±127)), as
  // LayerKvCache::StoreLatent does (rint rounds half to even like lrint in the default mode).
  float max_abs = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) max_abs = fmaxf(max_abs, fabsf(weight[i] * (row[i] * inv_rms)));
  max_abs = BlockMax<kThreads>(max_abs, scratch);
  const float token_scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  const float inv = 1.0f / token_scale;
  int8_t* dst = latent_i8 + slot * n;  // [n]
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float c = weight[i] * (row[i] * inv_rms);
    const float clamped = fminf(fmaxf(c * inv, -127.0f), 127.0f);
    dst[i] = static_cast<int8_t>(__float2int_rn(clamped));
  }
  if (threadIdx.x == 0) scale[slot] = token_scale;
}

__global__ void DequantiseKernel(const int8_t* __restrict__ latent_i8, const float* __restrict__ scale,
                                 int64_t count, int64_t n, float* __restrict__ out) {
  const int64_t total = count * n;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[t] = static_cast<float>(latent_i8[t]) * scale[t / n];
  }
}

}  // namespace

cudaError_t NormStoreLatent(const float* kv, int64_t rows, int64_t kv_stride, int64_t n, const float* weight,
                            float eps, float* latent_f32, int8_t* latent_i8, float* scale, int64_t first_slot,
                            cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  NormStoreLatentKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(kv, kv_stride, n, weight, eps,
                                                                              latent_f32, latent_i8, scale,
                                                                              first_slot);
  return cudaGetLastError();
}

cudaError_t DequantiseLatents(const int8_t* latent_i8, const float* scale, int64_t count, int64_t n, float* out,
                              cudaStream_t stream) {
  const int64_t total = count * n;
  if (total <= 0) return cudaSuccess;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  DequantiseKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(latent_i8, scale, count, n, out);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
