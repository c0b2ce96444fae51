#include "attention/indexer_fp8.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace mtpspec {

void HadamardRotate(float* x, int64_t d) {
  for (int64_t half = 1; half < d; half *= 2) {
    for (int64_t start = 0; start < d; start += 2 * half) {
      for (int64_t i = start; i < start + half; ++i) {
        const float a = x[i], b = x[i + half];
        x[i] = a + b;
        x[i + half] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t i = 0; i < d; ++i) x[i] *= scale;
}

float QuantizeFp8Row(const float* x, int64_t d, uint8_t* out) {
  float max_abs = 1e-4f;
  for (int64_t i = 0; i < d; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  // The smallest power of two ≥ max_abs / 448, from its binary exponent: v = m · 2^e with m in [½, 1).
  int exponent = 0;
  const float mantissa = std::frexp(max_abs / 448.0f, &exponent);
  const float scale = std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
  for (int64_t i = 0; i < d; ++i) out[i] = F32ToF8E4M3(x[i] / scale);
  return scale;
}

}  // namespace mtpspec
