// Register-tiled inner kernels shared by kernels/linear.cc and kernels/row_kernels.cc (internal header).
//
// Both kernels give every output element one fixed accumulation order, whatever the tile shape it
// was computed in. Callers may therefore group rows and split work freely: a row's result never
// depends on which other rows were in the call (the speculative-decoding invariant).
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/dtype.h"

namespace mtpspec::tiles {

// Most rows (or weight vectors) one tile handles; 4 × 4 accumulators fit in the registers.
constexpr int kMaxTile = 4;

#if defined(__AVX512F__)
inline __m512 LoadWeights(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 LoadWeights(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 LoadWeights(const uint16_t* p, __mmask16 mask) {
  const __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 LoadWeights(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }

inline void Prefetch(uintptr_t address) { _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0); }

// out[r][k] = Σ_{i<n} x[r][i] · w[k][i] for an NR × NK tile. Each (r, k) pair accumulates in
// 16 lanes (lane l takes i ≡ l mod 16, in order), then a masked tail, then one reduction: the same
// order for every tile shape. When `prefetch` is given, the line at prefetch[k] + (bytes of w[k]
// read so far) is prefetched as each new line of w[k] is reached; addresses are integers, so they
// may point past any allocation (a prefetch never faults).
template <int NR, int NK, typename W>
inline void DotTile(const float* const* x, const W* const* w, int64_t n, const uintptr_t* prefetch,
                    float (*out)[kMaxTile]) {
  constexpr int64_t kElementsPerLine = 64 / sizeof(W);
  __m512 acc[NR][NK];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (prefetch != nullptr && i % kElementsPerLine == 0) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) Prefetch(prefetch[k] + i * sizeof(W));
    }
    __m512 wv[NK];
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) wv[k] = LoadWeights(w[k] + i);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_loadu_ps(x[r] + i);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_fmadd_ps(wv[k], xv, acc[r][k]);
    }
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 wv[NK];
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) wv[k] = LoadWeights(w[k] + i, mask);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x[r] + i);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_fmadd_ps(wv[k], xv, acc[r][k]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) out[r][k] = _mm512_reduce_add_ps(acc[r][k]);
  }
}

// y[r][c] = Σ_{k<n} x[r][k] · w[k][col0 + c] for NR rows and NV vectors of 16 columns starting at
// col0; the last vector covers only the columns in `last_mask`. Each output accumulates with one
// FMA per k, in k order, whatever NR and NV. `prefetch_rows` ≥ 0 prefetches the same columns of
// w[k + prefetch_rows] while row k is used (skipped past the last row).
template <int NR, int NV, typename W>
inline void CombineTile(const float* const* x, const W* const* w, int64_t n, int64_t col0, __mmask16 last_mask,
                        int64_t prefetch_rows, float* const* y) {
  constexpr int64_t kLines = (NV * 16 * static_cast<int64_t>(sizeof(W)) + 63) / 64;
  __m512 acc[NR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < n; ++k) {
    if (prefetch_rows >= 0 && k + prefetch_rows < n) {
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(w[k + prefetch_rows] + col0);
#pragma GCC unroll 16
      for (int64_t line = 0; line < kLines; ++line) Prefetch(ahead + line * 64);
    }
    __m512 wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) wv[v] = LoadWeights(w[k] + col0 + 16 * v);
    wv[NV - 1] = LoadWeights(w[k] + col0 + 16 * (NV - 1), last_mask);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r][k]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xb, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(y[r] + col0 + 16 * v, acc[r][v]);
    _mm512_mask_storeu_ps(y[r] + col0 + 16 * (NV - 1), last_mask, acc[r][NV - 1]);
  }
}
#else
// Portable fallback: scalar loops with the same per-element orders as above, except that a dot
// product sums in plain index order (still independent of the tile shape).
inline float WeightAt(const float* w, int64_t i) { return w[i]; }
inline float WeightAt(const uint16_t* w, int64_t i) { return Bf16ToF32(w[i]); }

template <int NR, int NK, typename W>
inline void DotTile(const float* const* x, const W* const* w, int64_t n, const uintptr_t* /*prefetch*/,
                    float (*out)[kMaxTile]) {
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < NK; ++k) {
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) acc += x[r][i] * WeightAt(w[k], i);
      out[r][k] = acc;
    }
  }
}
#endif

}  // namespace mtpspec::tiles
