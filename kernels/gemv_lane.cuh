// The weight load shared by the row-count-invariant GEMV kernels (kernels/linear_cuda.cu and the
// grouped expert GEMVs of model/ffn_cuda.cu): each lane multiplies 8 consecutive weights of a row.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

constexpr int kGemvLaneValues = 8;  // weights per lane per tile (one 16-byte bf16 load)

// The lane's weights w_row[i0 .. i0 + 8) widened to f32, zero past `in`. `vector_loads`: the rows
// start 16-byte aligned (in % 8 == 0), so a full group is one 16-byte load.
__device__ inline void LoadLaneWeights(const __nv_bfloat16* w_row, int64_t i0, int64_t in, bool vector_loads,
                                       float wv[kGemvLaneValues]) {
  if (vector_loads && i0 + kGemvLaneValues <= in) {
    const uint4 packed = __ldg(reinterpret_cast<const uint4*>(w_row + i0));
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&packed);
#pragma unroll
    for (int j = 0; j < kGemvLaneValues; ++j) wv[j] = __bfloat162float(h[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kGemvLaneValues; ++j) wv[j] = i0 + j < in ? __bfloat162float(w_row[i0 + j]) : 0.0f;
  }
}

// The same for f32 rows (scalar loads).
__device__ inline void LoadLaneWeights(const float* w_row, int64_t i0, int64_t in, bool /*vector_loads*/,
                                       float wv[kGemvLaneValues]) {
#pragma unroll
  for (int j = 0; j < kGemvLaneValues; ++j) wv[j] = i0 + j < in ? w_row[i0 + j] : 0.0f;
}

}  // namespace mtpspec::cuda::launch
