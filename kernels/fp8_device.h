// FP8 (e4m3) weights on the device: their layout and the widening the GEMV kernels apply. Plain
// C++ shared by nvcc (kernels) and the host compiler (upload code and its tests), so the one
// decoding routine the kernels run is also checked on the host against core/dtype.h.
//
// An FP8 matrix [out, in] keeps its checkpoint bytes row-major and its weight_scale_inv blocks as
// f32 [scale rows, ceil(in / 128)]: weight (o, i) is e4m3(bytes[o, i]) · scales[ScaleRow(o), i / 128].
// A matrix fused from two (an MLP's gate rows, then its up rows) keeps both scale grids one after
// the other; `scale_split` is the first row of the second part, whose scale rows restart there.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/host_device.h"

namespace mtpspec::cuda {

inline constexpr int64_t kDeviceFp8Block = 128;  // the releases' weight_block_size

// One FP8 matrix on the device (non-owning; passed to kernels by value).
struct Fp8Weights {
  const uint8_t* bytes = nullptr;  // [out, in] e4m3
  const float* scales = nullptr;   // [scale rows, scale_cols]
  int64_t scale_cols = 0;          // ceil(in / 128)
  int64_t scale_split = 0;         // 0: one grid; else the first row of the second grid
};

// The number of 128-wide blocks that cover n values.
MTPSPEC_HOST_DEVICE inline int64_t Fp8Blocks(int64_t n) { return (n + kDeviceFp8Block - 1) / kDeviceFp8Block; }

// The scale row of weight row o.
MTPSPEC_HOST_DEVICE inline int64_t Fp8ScaleRow(int64_t o, int64_t scale_split) {
  if (scale_split == 0 || o < scale_split) return o / kDeviceFp8Block;
  return Fp8Blocks(scale_split) + (o - scale_split) / kDeviceFp8Block;
}

// Eight e4m3 bytes (byte j of `bits`, little-endian, is weight j) widened to f32 (exactly: every
// e4m3 value, subnormals and ±0 included, is an fp16 value; the NaN codes 0x7F and 0xFF give NaN)
// and each multiplied by `scale` in f32, as the host's dequantisation F8E4M3ToF32(b) · scale does.
MTPSPEC_HOST_DEVICE inline void WidenFp8x8(uint64_t bits, float scale, float out[8]) {
  for (int pair = 0; pair < 4; ++pair) {
    const auto two = static_cast<__nv_fp8x2_storage_t>((bits >> (16 * pair)) & 0xFFFFu);
    const float2 wide = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3)));
    out[2 * pair] = wide.x * scale;
    out[2 * pair + 1] = wide.y * scale;
  }
}

}  // namespace mtpspec::cuda
