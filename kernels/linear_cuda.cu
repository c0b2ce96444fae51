// Kernels of kernels/linear_cuda: the small-row GEMV over bf16 or FP8 weights, f32 → bf16
// rounding, and the widening of FP8 rows to bf16 for cuBLAS.
//
// GEMV layout: a block of kWarps warps owns kWarps consecutive output rows (one per warp). The
// input dimension is walked in tiles of kTile = 32 lanes × 8 values; each tile of x (all rows) is
// staged in shared memory once per block, and each lane multiplies its 8 weights (one 16-byte bf16
// or 8-byte FP8 load, widened to f32 in registers; FP8 times its block scale) with the 8 matching x
// values of every row. Per (row, output) the order of operations — lane-local FMAs tile by tile,
// then a fixed xor-shuffle tree — is the same for any row count, so a verify block reproduces plain
// decode bit for bit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemv_lane.cuh"
#include "kernels/linear_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kWarps = 8;
constexpr int kLaneValues = kGemvLaneValues;
constexpr int kTile = 32 * kLaneValues;  // input values per tile
constexpr int kMaxRows = 16;

// Row o of a bf16 matrix whose first row is `w`.
struct Bf16Rows {
  const __nv_bfloat16* w;  // [out, in]
  __device__ const __nv_bfloat16* Row(int64_t o, int64_t in) const { return w + o * in; }
};

// Row o of the rows [row_begin, …) of an FP8 matrix (its scale rows count from the matrix's row 0).
struct Fp8Rows {
  Fp8Weights w;
  int64_t row_begin;
  __device__ Fp8Row Row(int64_t o, int64_t in) const { return RowOf(w, row_begin + o, in); }
};

template <int kRows, typename Rows>
__global__ void GemvKernel(const float* __restrict__ x, Rows rows_of_w, int64_t out, int64_t in,
                           float* __restrict__ y) {
  __shared__ float x_tile[kRows][kTile];  // [rows, kTile]
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = o < out;
  const auto w_row = rows_of_w.Row(active ? o : 0, in);  // [in]
  const bool vector_loads = (in % kLaneValues) == 0;     // rows start 16 (bf16) or 8 (FP8) bytes aligned

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  for (int64_t base = 0; base < in; base += kTile) {
    // Stage x[:, base .. base + kTile) (zero past the end).
    for (int t = threadIdx.x; t < kRows * kTile; t += blockDim.x) {
      const int r = t / kTile;
      const int c = t % kTile;
      const int64_t i = base + c;
      x_tile[r][c] = i < in ? x[r * in + i] : 0.0f;
    }
    __syncthreads();
    if (active) {
      const int64_t i0 = base + lane * kLaneValues;
      float wv[kLaneValues];
      LoadLaneWeights(w_row, i0, in, vector_loads, wv);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < kLaneValues; ++j) acc[r] = fmaf(wv[j], x_tile[r][lane * kLaneValues + j], acc[r]);
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) y[r * out + o] = v;
  }
}

template <int kRows, typename Rows>
cudaError_t LaunchGemv(const float* x, Rows w, int64_t out, int64_t in, float* y, cudaStream_t stream) {
  const int64_t blocks = (out + kWarps - 1) / kWarps;
  GemvKernel<kRows, Rows><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(x, w, out, in, y);
  return cudaGetLastError();
}

template <int kRows, typename Rows>
cudaError_t DispatchGemv(int64_t rows, const float* x, Rows w, int64_t out, int64_t in, float* y,
                         cudaStream_t stream) {
  if constexpr (kRows > kMaxRows) {
    return cudaErrorInvalidValue;
  } else {
    if (rows == kRows) return LaunchGemv<kRows, Rows>(x, w, out, in, y, stream);
    return DispatchGemv<kRows + 1, Rows>(rows, x, w, out, in, y, stream);
  }
}

// dst[o, i] = bf16(e4m3(bytes) · scale) for the rows [row_begin, row_begin + out), grid-stride.
__global__ void WidenFp8ToBf16Kernel(Fp8Weights w, int64_t row_begin, int64_t out, int64_t in,
                                     __nv_bfloat16* __restrict__ dst) {
  const int64_t groups_per_row = (in + kLaneValues - 1) / kLaneValues;
  const int64_t groups = out * groups_per_row;
  const bool vector_loads = (in % kLaneValues) == 0;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = g / groups_per_row;
    const int64_t i0 = (g % groups_per_row) * kLaneValues;
    float wv[kLaneValues];
    LoadLaneWeights(RowOf(w, row_begin + o, in), i0, in, vector_loads, wv);
    __nv_bfloat16* dst_row = dst + o * in;  // [in]
#pragma unroll
    for (int j = 0; j < kLaneValues; ++j) {
      if (i0 + j < in) dst_row[i0 + j] = __float2bfloat16_rn(wv[j]);
    }
  }
}

__global__ void F32ToBf16Kernel(const float* __restrict__ src, int64_t n, __nv_bfloat16* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

}  // namespace

cudaError_t GemvBf16(const float* x, int64_t rows, const __nv_bfloat16* w, int64_t out, int64_t in, float* y,
                     cudaStream_t stream) {
  if (rows < 1 || rows > kMaxRows || out < 1 || in < 1) return cudaErrorInvalidValue;
  return DispatchGemv<1, Bf16Rows>(rows, x, Bf16Rows{w}, out, in, y, stream);
}

cudaError_t GemvFp8(const float* x, int64_t rows, const Fp8Weights& w, int64_t row_begin, int64_t out, int64_t in,
                    float* y, cudaStream_t stream) {
  if (rows < 1 || rows > kMaxRows || out < 1 || in < 1 || row_begin < 0) return cudaErrorInvalidValue;
  return DispatchGemv<1, Fp8Rows>(rows, x, Fp8Rows{w, row_begin}, out, in, y, stream);
}

cudaError_t WidenFp8ToBf16(const Fp8Weights& w, int64_t row_begin, int64_t out, int64_t in, __nv_bfloat16* dst,
                           cudaStream_t stream) {
  if (out <= 0 || in <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t groups = out * ((in + kLaneValues - 1) / kLaneValues);
  const int64_t blocks = (groups + threads - 1) / threads;
  WidenFp8ToBf16Kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(
      w, row_begin, out, in, dst);
  return cudaGetLastError();
}

cudaError_t F32ToBf16(const float* src, int64_t n, __nv_bfloat16* dst, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  F32ToBf16Kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(src, n, dst);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
