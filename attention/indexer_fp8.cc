#include "attention/indexer_fp8.h"

#include <cmath>

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

}  // namespace mtpspec
