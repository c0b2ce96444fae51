#include "core/fp8_quantise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/status.h"

namespace mtpspec {
namespace {

// Row r of w widened to f32: dst[0 … in).
void RowToF32(const TensorView& w, int64_t r, float* dst) {
  const int64_t in = w.shape[1];
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(dst, w.as<float>() + r * w.stride[0], in * sizeof(float));
      break;
    case DType::kBF16: {
      const uint16_t* src = w.as<uint16_t>() + r * w.stride[0];
      for (int64_t c = 0; c < in; ++c) dst[c] = Bf16ToF32(src[c]);
      break;
    }
    default: {
      MTPSPEC_CHECK(w.dtype == DType::kF16);
      const uint16_t* src = w.as<uint16_t>() + r * w.stride[0];
      for (int64_t c = 0; c < in; ++c) dst[c] = F16ToF32(src[c]);
    }
  }
}

}  // namespace

Fp8Matrix QuantiseFp8(const TensorView& w, bool power_of_two_scales, ThreadPool* pool) {
  MTPSPEC_CHECK(w.ndim == 2 && w.stride[1] == 1);
  const int64_t out = w.shape[0], in = w.shape[1];
  const int64_t bands = (out + kFp8Block - 1) / kFp8Block, cols = (in + kFp8Block - 1) / kFp8Block;
  Fp8Matrix q{Tensor::Empty(DType::kF8E4M3, {out, in}), Tensor::Empty(DType::kF32, {bands, cols})};
  uint8_t* codes = q.codes.data<uint8_t>();
  float* scales = q.scales.data<float>();
  if (pool == nullptr) pool = &DefaultThreadPool();
  pool->ParallelFor(bands, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> band(static_cast<size_t>(kFp8Block * in));  // [128, in] the band's rows in f32
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * kFp8Block, rows = std::min(out, r0 + kFp8Block) - r0;
      for (int64_t r = 0; r < rows; ++r) RowToF32(w, r0 + r, band.data() + r * in);
      for (int64_t bc = 0; bc < cols; ++bc) {
        const int64_t c0 = bc * kFp8Block, c1 = std::min(in, c0 + kFp8Block);
        float amax = 0.0f;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(band[r * in + c]));
        }
        float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        if (power_of_two_scales) scale = std::exp2(std::ceil(std::log2(scale)));
        scales[b * cols + bc] = scale;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = c0; c < c1; ++c) codes[(r0 + r) * in + c] = F32ToF8E4M3(band[r * in + c] / scale);
        }
      }
    }
  });
  return q;
}

float PowerOfTwoAtLeast(float v) {
  // From v's binary exponent: v = m · 2^e with m in [½, 1).
  int exponent = 0;
  const float mantissa = std::frexp(v, &exponent);
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

float Fp8GroupScale(float max_abs) { return PowerOfTwoAtLeast(std::max(max_abs, 1e-4f) / 448.0f); }

float QuantizeFp8Row(const float* x, int64_t d, uint8_t* out) {
  float max_abs = 0.0f;
  for (int64_t i = 0; i < d; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  const float scale = Fp8GroupScale(max_abs);
  for (int64_t i = 0; i < d; ++i) out[i] = F32ToF8E4M3(x[i] / scale);
  return scale;
}

}  // namespace mtpspec
