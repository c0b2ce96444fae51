// Plain launch functions of kernels/norm_cuda.cu (shared with nvcc; no absl).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

cudaError_t RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out,
                    cudaStream_t stream);
cudaError_t LayerNorm(const float* x, const float* weight, const float* bias, int64_t rows, int64_t n, float eps,
                      float* out, cudaStream_t stream);
cudaError_t AddInPlace(const float* x, int64_t n, float* y, cudaStream_t stream);
cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t n, float* out, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
