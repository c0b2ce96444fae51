// Plain launch functions of attention/rope_cuda.cu (shared with nvcc; no absl).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

// Rotates pairs of `count` vectors per row in place with the tables cos/sin [positions, half].
// Vector v of row r starts at x + r·row_stride + v·vec_stride; its position is first_position + r.
// interleaved: pairs (2i, 2i+1); otherwise (i, i + half).
cudaError_t RopeApply(float* x, int64_t rows, int64_t count, int64_t row_stride, int64_t vec_stride, int64_t half,
                      const float* cos_table, const float* sin_table, int64_t first_position, bool interleaved,
                      cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
