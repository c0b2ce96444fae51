// Plain launch functions of kernels/linear_cuda.cu (no absl: this header is shared with nvcc).
// Each returns the launch's cudaError_t.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fp8_device.h"

namespace mtpspec::cuda::launch {

// y[rows, out] = x[rows, in] · w[out, in]ᵀ, rows in 1..16, fixed per-(row, output) reduction order.
cudaError_t GemvBf16(const float* x, int64_t rows, const __nv_bfloat16* w, int64_t out, int64_t in, float* y,
                     cudaStream_t stream);
// The same over the rows [row_begin, row_begin + out) of an FP8 matrix: each weight widened to f32
// and multiplied by its block scale in registers (kernels/fp8_device.h). y: [rows, out].
cudaError_t GemvFp8(const float* x, int64_t rows, const Fp8Weights& w, int64_t row_begin, int64_t out, int64_t in,
                    float* y, cudaStream_t stream);
// dst[o, i] = bf16(e4m3(w[row_begin + o, i]) · its scale), round to nearest even: the values
// WeightArena's bf16 upload of the same matrix holds. dst: [out, in].
cudaError_t WidenFp8ToBf16(const Fp8Weights& w, int64_t row_begin, int64_t out, int64_t in, __nv_bfloat16* dst,
                           cudaStream_t stream);
// dst[i] = bf16(src[i]), round to nearest even.
cudaError_t F32ToBf16(const float* src, int64_t n, __nv_bfloat16* dst, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
