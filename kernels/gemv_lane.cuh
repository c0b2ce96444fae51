// The weight load shared by the row-count-invariant GEMV kernels (kernels/linear_cuda.cu and the
// grouped expert GEMVs of model/ffn_cuda.cu): each lane multiplies 8 consecutive weights of a row,
// stored as bf16, f32 or FP8 with block scales.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fp8_device.h"

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

// One FP8 weight row: its e4m3 bytes and its scale row (kernels/fp8_device.h).
struct Fp8Row {
  const uint8_t* bytes;  // [in]
  const float* scales;   // [ceil(in / 128)]
};

// The row of weight row o of `w` (o counts from the matrix's first row).
__device__ inline Fp8Row RowOf(const Fp8Weights& w, int64_t o, int64_t in) {
  return Fp8Row{w.bytes + o * in, w.scales + Fp8ScaleRow(o, w.scale_split) * w.scale_cols};
}

// The same for FP8 rows: the lane's 8 weights widened and multiplied by their block's scale (8
// consecutive weights starting at a multiple of 8 never straddle a 128-wide block). `vector_loads`:
// the rows start 8-byte aligned (in % 8 == 0), so a full group is one 8-byte load.
__device__ inline void LoadLaneWeights(const Fp8Row& row, int64_t i0, int64_t in, bool vector_loads,
                                       float wv[kGemvLaneValues]) {
  if (i0 >= in) {
#pragma unroll
    for (int j = 0; j < kGemvLaneValues; ++j) wv[j] = 0.0f;
    return;
  }
  uint64_t bits = 0;  // bytes past `in` stay 0, which widens to +0
  if (vector_loads && i0 + kGemvLaneValues <= in) {
    bits = __ldg(reinterpret_cast<const unsigned long long*>(row.bytes + i0));
  } else {
#pragma unroll
    for (int j = 0; j < kGemvLaneValues; ++j) {
      if (i0 + j < in) bits |= static_cast<uint64_t>(row.bytes[i0 + j]) << (8 * j);
    }
  }
  WidenFp8x8(bits, __ldg(row.scales + i0 / kDeviceFp8Block), wv);
}

}  // namespace mtpspec::cuda::launch
