#include "kernels/bf16_pairs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define MTPSPEC_BF16_DOT_SIMD 1
#endif

namespace mtpspec {
namespace {

// The bf16 bits of every e4m3 byte, from the scalar conversions (the NaN codes as ±480, as the SIMD
// arithmetic below gives them).
struct Fp8Bf16Table {
  uint16_t bits[256];
  Fp8Bf16Table() {
    for (int b = 0; b < 256; ++b) {
      const bool nan_code = (b & 0x7f) == 0x7f;
      bits[b] = F32ToBf16(nan_code ? ((b & 0x80) ? -480.0f : 480.0f) : F8E4M3ToF32(static_cast<uint8_t>(b)));
    }
  }
};
const Fp8Bf16Table& Fp8ToBf16Bits() {
  static const Fp8Bf16Table table;
  return table;
}

#if defined(MTPSPEC_BF16_DOT_SIMD)
// Rows in groups of NR against V vectors of 16 columns: NR × V accumulators, each w vector loaded once
// per pair and used by every row of the group. `last_mask` limits the last vector's columns. The loops
// over rows and vectors are unrolled by pragma: left to GCC, it kept the accumulators in registers but
// also stored every one of them to the stack after each multiply-add (a third of the speed).
template <int NR, int V>
void CombineGroup(const uint32_t* x, int64_t x_stride, const uint32_t* w, int64_t pairs, int64_t w_stride,
                  __mmask16 last_mask, float* y, int64_t y_stride) {
  __m512 acc[NR][V];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
#pragma GCC unroll 1
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* wp = w + p * w_stride;
    __m512bh wv[V];
    for (int v = 0; v < V - 1; ++v) wv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wp + 16 * v));
    wv[V - 1] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi32(last_mask, wp + 16 * (V - 1)));
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[r * x_stride + p])));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv, wv[v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V - 1; ++v) _mm512_storeu_ps(y + r * y_stride + 16 * v, acc[r][v]);
    _mm512_mask_storeu_ps(y + r * y_stride + 16 * (V - 1), last_mask, acc[r][V - 1]);
  }
}

// All rows against V vectors of columns: groups of 4 rows, then single rows.
template <int V>
void CombineColumns(const uint32_t* x, int64_t rows, int64_t x_stride, const uint32_t* w, int64_t pairs,
                    int64_t w_stride, __mmask16 last_mask, float* y, int64_t y_stride) {
  constexpr int kRows = 4;  // 4 × 4 accumulators at most
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    CombineGroup<kRows, V>(x + r * x_stride, x_stride, w, pairs, w_stride, last_mask, y + r * y_stride, y_stride);
  }
  for (; r < rows; ++r) {
    CombineGroup<1, V>(x + r * x_stride, x_stride, w, pairs, w_stride, last_mask, y + r * y_stride, y_stride);
  }
}
#endif

}  // namespace

void WidenFp8ToBf16(const uint8_t* src, int64_t n, uint16_t* dst) {
  const uint16_t* table = Fp8ToBf16Bits().bits;
  int64_t i = 0;
#if defined(__AVX512BW__)
  // Normal bytes: sign, then the exponent and mantissa fields moved up by 4 bits with the exponent
  // bias raised from 7 to 127 (+120 << 7). Subnormal bytes (exponent field 0): the table's first 8.
  const __m512i subnormals = _mm512_maskz_loadu_epi16(0xff, table);
  for (; i + 32 <= n; i += 32) {
    const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i magnitude = _mm512_and_si512(bytes, _mm512_set1_epi16(0x7f));
    const __m512i normal = _mm512_add_epi16(_mm512_slli_epi16(magnitude, 4), _mm512_set1_epi16(120 << 7));
    const __m512i subnormal = _mm512_permutexvar_epi16(magnitude, subnormals);
    const __mmask32 is_subnormal = _mm512_cmplt_epu16_mask(magnitude, _mm512_set1_epi16(8));
    const __m512i value = _mm512_mask_blend_epi16(is_subnormal, normal, subnormal);
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(bytes, _mm512_set1_epi16(0x80)), 8);
    _mm512_storeu_si512(dst + i, _mm512_or_si512(value, sign));
  }
#endif
  for (; i < n; ++i) dst[i] = table[src[i]];
}

void CombineBf16Pairs(const uint32_t* x, int64_t rows, int64_t x_stride, const uint32_t* w, int64_t pairs,
                      int64_t w_stride, int64_t width, float* y, int64_t y_stride) {
#if defined(MTPSPEC_BF16_DOT_SIMD)
  constexpr int64_t kColumns = 64;  // 4 vectors of 16 f32 accumulators per row
  for (int64_t c0 = 0; c0 < width; c0 += kColumns) {
    const int64_t nc = std::min(kColumns, width - c0);
    const int vectors = static_cast<int>((nc + 15) / 16);
    const int tail = static_cast<int>(nc - 16 * (vectors - 1));
    const __mmask16 last_mask = static_cast<__mmask16>((1u << tail) - 1u);
    const uint32_t* wc = w + c0;
    float* yc = y + c0;
    switch (vectors) {
      case 4: CombineColumns<4>(x, rows, x_stride, wc, pairs, w_stride, last_mask, yc, y_stride); break;
      case 3: CombineColumns<3>(x, rows, x_stride, wc, pairs, w_stride, last_mask, yc, y_stride); break;
      case 2: CombineColumns<2>(x, rows, x_stride, wc, pairs, w_stride, last_mask, yc, y_stride); break;
      default: CombineColumns<1>(x, rows, x_stride, wc, pairs, w_stride, last_mask, yc, y_stride); break;
    }
  }
#else
  // The same chain with f32 multiply-adds on the widened values (a product of two bf16 values is exact
  // in f32, so fma(a, b, acc) rounds only the sum, as the instruction does), vectorised over columns.
  std::vector<float> acc(width);  // [width]
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t p = 0; p < pairs; ++p) {
      const float x_even = Bf16PairLow(x[r * x_stride + p]), x_odd = Bf16PairHigh(x[r * x_stride + p]);
      const uint32_t* wp = w + p * w_stride;
      for (int64_t c = 0; c < width; ++c) {
        acc[c] = std::fma(x_even, Bf16PairLow(wp[c]), std::fma(x_odd, Bf16PairHigh(wp[c]), acc[c]));
      }
    }
    std::copy(acc.begin(), acc.end(), y + r * y_stride);
  }
#endif
}

}  // namespace mtpspec
