// Kernel of attention/rope_cuda: one thread per (row, vector, pair). Each pair reads its cos/sin
// from the tables and rotates as the CPU does: (a, b) → (a·c − b·s, b·c + a·s).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/rope_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;

__global__ void RopeKernel(float* x, int64_t rows, int64_t count, int64_t row_stride, int64_t vec_stride,
                           int64_t half, const float* __restrict__ cos_table, const float* __restrict__ sin_table,
                           int64_t first_position, bool interleaved) {
  const int64_t total = rows * count * half;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % half;            // pair index
    const int64_t v = (t / half) % count;  // vector within the row
    const int64_t r = t / (half * count);  // row
    float* vec = x + r * row_stride + v * vec_stride;  // [2·half]
    const int64_t table = (first_position + r) * half + i;
    const float c = cos_table[table];
    const float s = sin_table[table];
    float* u = interleaved ? vec + 2 * i : vec + i;
    float* w = interleaved ? vec + 2 * i + 1 : vec + i + half;
    const float a = *u;
    const float b = *w;
    // Written without fma contraction so that it rounds like the CPU's a·c − b·s.
    *u = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    *w = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

}  // namespace

cudaError_t RopeApply(float* x, int64_t rows, int64_t count, int64_t row_stride, int64_t vec_stride, int64_t half,
                      const float* cos_table, const float* sin_table, int64_t first_position, bool interleaved,
                      cudaStream_t stream) {
  const int64_t total = rows * count * half;
  if (total <= 0) return cudaSuccess;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  RopeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, rows, count, row_stride, vec_stride, half,
                                                                      cos_table, sin_table, first_position,
                                                                      interleaved);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
