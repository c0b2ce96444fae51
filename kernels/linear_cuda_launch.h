// Plain launch functions of kernels/linear_cuda.cu (no absl: this header is shared with nvcc).
// Each returns the launch's cudaError_t.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

// y[rows, out] = x[rows, in] · w[out, in]ᵀ, rows in 1..16, fixed per-(row, output) reduction order.
cudaError_t GemvBf16(const float* x, int64_t rows, const __nv_bfloat16* w, int64_t out, int64_t in, float* y,
                     cudaStream_t stream);
// dst[i] = bf16(src[i]), round to nearest even.
cudaError_t F32ToBf16(const float* src, int64_t n, __nv_bfloat16* dst, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
