// Products over bf16 pairs with f32 accumulation: the arithmetic of the AVX-512 BF16 dot product
// (VDPBF16PS), used by the indexer when its keys are stored in bf16 (attention/indexer.h).
//
// A pair packs two bf16 values in one 32-bit word: element 2p in the low half, 2p + 1 in the high
// half. One step of a chain adds to an f32 accumulator the product of the odd elements, rounds,
// then adds the product of the even elements and rounds again. Products of two bf16 values are
// exact in f32, so the chain rounds only its sums, in a fixed order: a row's result never depends on
// the other rows of a call, like every kernel here (kernels/row_kernels.h). Both the SIMD body and the
// scalar model below compute that chain; they agree bit for bit on normal f32 values (VDPBF16PS
// flushes subnormal inputs and results to zero, the scalar model does not). Builds for CPUs without
// AVX-512 BF16 run the chain with f32 multiply-adds, two per pair: slower than the f32 keys' path.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace mtpspec {

inline uint32_t PackBf16Pair(float even, float odd) {
  return static_cast<uint32_t>(F32ToBf16(even)) | static_cast<uint32_t>(F32ToBf16(odd)) << 16;
}
inline float Bf16PairLow(uint32_t pair) { return Bf16ToF32(static_cast<uint16_t>(pair & 0xffffu)); }
inline float Bf16PairHigh(uint32_t pair) { return Bf16ToF32(static_cast<uint16_t>(pair >> 16)); }

// One step of the chain: (acc + x_odd·w_odd) + x_even·w_even, each sum rounded to f32. The products
// are exact, so each is one multiply-add.
inline float Bf16PairStep(float acc, uint32_t x, uint32_t w) {
  const float odd_sum = std::fma(Bf16PairHigh(x), Bf16PairHigh(w), acc);
  return std::fma(Bf16PairLow(x), Bf16PairLow(w), odd_sum);
}

// dst[i] = the bf16 bits of the float8_e4m3fn byte src[i], for i < n: exact, since every e4m3 value
// is a bf16 value (subnormals included). The NaN encodings 0x7f and 0xff come out as ±480; callers
// pass bytes they quantised themselves, which hold no NaN.
void WidenFp8ToBf16(const uint8_t* src, int64_t n, uint16_t* dst);

// y[r·y_stride + c] = the chain over p < pairs of Bf16PairStep(·, x[r·x_stride + p], w[p·w_stride + c]),
// started from 0, for r < rows and c < width: each output row combines the pair rows w[0 .. pairs).
// x: [rows, ≥ pairs] pairs; w: [pairs, ≥ width] pairs; y: [rows, ≥ width] f32.
void CombineBf16Pairs(const uint32_t* x, int64_t rows, int64_t x_stride, const uint32_t* w, int64_t pairs,
                      int64_t w_stride, int64_t width, float* y, int64_t y_stride);

}  // namespace mtpspec
