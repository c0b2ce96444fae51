// Register-tiled inner kernels shared by kernels/linear.cc and kernels/row_kernels.cc (internal header).
//
// Both kernels give every output element one fixed accumulation order, whatever the tile shape it
// was computed in. Callers may therefore group rows and split work freely: a row's result never
// depends on which other rows were in the call (the speculative-decoding invariant).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/row_kernels.h"

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

// The weight rows DotTile and CombineTile read: a pointer to f32 or bf16 elements, or an FP8 row with
// its block scales (Fp8ScaledRow, below). LoadRow(row, i) gives elements i … i + 15 as f32 (i a
// multiple of 16), RowAddress(row, i) the address of element i, for prefetches.
inline __m512 LoadRow(const float* row, int64_t i) { return LoadWeights(row + i); }
inline __m512 LoadRow(const float* row, int64_t i, __mmask16 mask) { return LoadWeights(row + i, mask); }
inline __m512 LoadRow(const uint16_t* row, int64_t i) { return LoadWeights(row + i); }
inline __m512 LoadRow(const uint16_t* row, int64_t i, __mmask16 mask) { return LoadWeights(row + i, mask); }
template <typename W>
inline uintptr_t RowAddress(const W* row, int64_t i) { return reinterpret_cast<uintptr_t>(row + i); }
inline uintptr_t RowAddress(const Fp8ScaledRow& row, int64_t i) { return reinterpret_cast<uintptr_t>(row.bytes + i); }
template <typename Row>
inline constexpr int64_t kRowElementBytes = sizeof(std::remove_pointer_t<Row>);
template <>
inline constexpr int64_t kRowElementBytes<Fp8ScaledRow> = 1;
// Whether a row type carries a scale per 128-element block (FP8 rows with SIMD widening, below), which
// the tiles then fetch once per block.
template <typename Row>
inline constexpr bool kBlockScaled = false;

// Into L2, not L1: a GEMV reuses its x row (24 KiB at GLM-5.2's width) across every tile, and
// weights prefetched into L1 evict it (bench/linear_bench).
inline void Prefetch(uintptr_t address) { _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T1); }

// v, held in a register: the compiler may no longer fold the load that made it into each of its
// uses. In a tile of several rows GCC otherwise folds the x vector (or the weight vector) into every
// multiply-add as a memory operand, turning one load per row into one per multiply-add; the loads
// then bound the tile (an f32 4 × 4 tile ran at about half its multiply-add rate).
inline __m512 InRegister(__m512 v) {
  asm("" : "+v"(v));
  return v;
}

// The lane sum of v, in the tree GCC's _mm512_reduce_add_ps adds it by: lanes i and i + 8 (i < 8),
// then the results' i and i + 4 (i < 4), then 0 and 2 and 1 and 3, then those two.
inline float ReduceLanes(__m512 v) {
  const __m256 t3 = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
  return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

// out[m] = ReduceLanes(v[m]) for m < 16, the same sums with the same bits, for 16 vectors at once:
// each step adds the two halves of two vectors packed side by side into one, so that 15 additions
// and 30 shuffles do the work of sixteen reductions (about 130 operations). A short dot product is
// bound by its reductions (a 4 × 4 tile over 64 elements has 64 multiply-adds and 16 of them).
inline void ReduceLanes16(const __m512 (&v)[16], float* out) {
  __m512 eighths[8];  // eighths[p]: lanes 0-7 hold v[2p]'s i + (i + 8), lanes 8-15 v[2p + 1]'s
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    const __m512 low = _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 high = _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2));
    eighths[p] = _mm512_add_ps(high, low);
  }
  __m512 quarters[4];  // quarters[s]: lanes 4j … 4j + 3 hold v[4s + j]'s four partial sums
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const __m512 low = _mm512_shuffle_f32x4(eighths[2 * s], eighths[2 * s + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 high = _mm512_shuffle_f32x4(eighths[2 * s], eighths[2 * s + 1], _MM_SHUFFLE(3, 1, 3, 1));
    quarters[s] = _mm512_add_ps(high, low);
  }
  __m512 halves[2];  // halves[t], 128-bit lane q: v[8t + q]'s two partial sums, then v[8t + 4 + q]'s
#pragma GCC unroll 2
  for (int t = 0; t < 2; ++t) {
    const __m512 low = _mm512_shuffle_ps(quarters[2 * t], quarters[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 high = _mm512_shuffle_ps(quarters[2 * t], quarters[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2));
    halves[t] = _mm512_add_ps(low, high);
  }
  // Lane 4q + j: the sum of v[4j + q]; one permutation puts lane m at v[m].
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, sums));
}

// out[r][k] = ReduceLanes(acc[r][k]) for an NR × NK tile: tiles of 8 accumulators or more together
// (ReduceLanes16, the unused ones zero), smaller ones one by one.
template <int NR, int NK>
inline void ReduceTile(const __m512 (&acc)[NR][NK], float (*out)[kMaxTile]) {
  if constexpr (NR * NK >= 8) {
    __m512 v[16];
    float sums[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) v[m] = m < NR * NK ? acc[m / NK][m % NK] : _mm512_setzero_ps();
    ReduceLanes16(v, sums);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) out[r][k] = sums[r * NK + k];
    }
  } else {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) out[r][k] = ReduceLanes(acc[r][k]);
    }
  }
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define MTPSPEC_FP8_SIMD 1
// FP8 values come out of the conversion below scaled by 2^-8; the block scale is multiplied by this
// (a power of two, so exactly) before it meets them.
inline constexpr float kFp8Unscale = 256.0f;

// 16 float8_e4m3fn weights widened to f32 · 2^-8, exactly: each byte becomes the fp16 with the same
// sign, exponent field and mantissa (e4m3's bias 7 against fp16's 15 makes the factor 2^-8, and
// e4m3 subnormals land on fp16 subnormals), which vcvtph2ps widens. Fp8Careful also turns the NaN
// encodings 0x7f and 0xff into NaN (the plain conversion would read them as ±480); `lanes` masks
// the bytes read.
inline __m256i Fp8BytesAsHalf(__m128i bytes) {
  const __m256i wide = _mm256_cvtepi8_epi16(bytes);  // sign bits in 8..15
  return _mm256_and_si256(_mm256_slli_epi16(wide, 7), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
}
inline __m256i Fp8AsHalf(const uint8_t* p, __mmask16 lanes) { return Fp8BytesAsHalf(_mm_maskz_loadu_epi8(lanes, p)); }
inline __m512 Fp8Fast(const uint8_t* p) {
  return _mm512_cvtph_ps(Fp8BytesAsHalf(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 Fp8Careful(const uint8_t* p, __mmask16 lanes = 0xFFFF) {
  const __m256i half = Fp8AsHalf(p, lanes);
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(half, _mm256_set1_epi16(0x7FFF)),
                                                _mm256_set1_epi16(0x3F80));
  return _mm512_cvtph_ps(_mm256_mask_mov_epi16(half, nan, _mm256_set1_epi16(0x7E00)));
}
// Whether the 64 bytes at p hold a NaN encoding.
inline bool Fp8LineHasNan(const uint8_t* p) {
  const __m512i line = _mm512_loadu_si512(p);
  return _mm512_cmpeq_epi8_mask(_mm512_and_si512(line, _mm512_set1_epi8(0x7F)), _mm512_set1_epi8(0x7F)) != 0;
}

// 16 float8_e4m3fn weights widened to f32 · 2^-120, exactly, in three integer operations and no
// conversion: the sign-extended byte shifted left by 20 puts e4m3's exponent and mantissa fields at
// the bottom of f32's (its bias 7 against f32's 127 makes the factor 2^-120, and e4m3 subnormals land
// on f32 subnormals), and the mask keeps the sign on bit 31 and clears the bits between. The NaN
// encodings come out finite (±480 · 2^-120), so only rows known free of them may take this
// (TensorView::fp8_nan_free). The factor would push the products into f32's subnormals, so the tile
// reads x scaled by 2^112 (kFp8DirectInputScale): x · 2^112 times w · 2^-120 is x · w · 2^-8, the
// very product the fp16 route forms, and the block sums equal that route's bit for bit.
inline constexpr float kFp8DirectInputScale = 0x1p112f;
inline __m512 Fp8DirectBytes(__m128i bytes) {
  const __m512i wide = _mm512_cvtepi8_epi32(bytes);
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(wide, 20), _mm512_set1_epi32(static_cast<int>(0x87F00000u))));
}
inline __m512 Fp8Direct(const uint8_t* p) { return Fp8DirectBytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512 Fp8Direct(const uint8_t* p, __mmask16 lanes) { return Fp8DirectBytes(_mm_maskz_loadu_epi8(lanes, p)); }

// A 64-byte line of FP8 weights as Fp8Direct's four vectors (the same bits, in index order), with
// GFNI: a dword permutation lays the line out so that the in-lane unpacks below end in index order,
// one affine bit-matrix product each (vgf2p8affineqb) moves the sign, exponent and mantissa bits of
// every byte to where f32 keeps them in its top two bytes, and two rounds of unpacks put those two
// bytes above a zero low half. That is 9 vector operations per 64 weights against Fp8Direct's 12
// (sign extension, shift, mask per 16), and a one-row FP8 GEMV is bound by exactly that work here
// (bench/linear_bench; byte permutes with vpermi2b and shifts in place of the word unpacks measured
// slower on this CPU, and so did four zero-masked vpermi2b that gather each vector's two bytes
// straight from the affine products, in place of the dword permutation and every unpack, although
// that is 6 operations per line: a 512-bit two-table byte permute costs more than an unpack here).
// Several rows share each widened vector and are bound by the
// multiply-adds instead, which the bit-matrix products compete with, so only one-row tiles take it.
#if defined(__GFNI__)
struct Fp8Line {
  // Lane q of low_words: the top halves of weights 4q … 4q + 3 of vectors 0 and 1, as 16-bit words;
  // of high_words: of vectors 2 and 3.
  __m512i low_words, high_words;
  Fp8Line() = default;
  explicit Fp8Line(const uint8_t* p) {
    // Dword 4q + j of the permuted line is dword 4j + q of the line: the 16 bytes of lane q then hold
    // weights 4q … 4q + 3 of each vector j, which is where the unpacks leave them.
    const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    // Matrix row i (byte 7 − i of the qword) selects the source bits of output bit i. f32 bits 31-24:
    // bit 7 ← the sign (bit 7), bits 2-0 ← exponent bits 6-4; f32 bits 23-16: bits 7-4 ← bits 3-0.
    const __m512i top_byte = _mm512_set1_epi64(0x1020400000000080LL);
    const __m512i next_byte = _mm512_set1_epi64(0x0000000001020408LL);
    const __m512i bytes = _mm512_permutexvar_epi32(transpose, _mm512_loadu_si512(p));
    const __m512i top = _mm512_gf2p8affine_epi64_epi8(bytes, top_byte, 0);
    const __m512i next = _mm512_gf2p8affine_epi64_epi8(bytes, next_byte, 0);
    low_words = _mm512_unpacklo_epi8(next, top);
    high_words = _mm512_unpackhi_epi8(next, top);
  }
  // Weights 16j … 16j + 15 of the line, as Fp8Direct(p + 16j) gives them.
  __m512 Vector(int j) const {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i words = j < 2 ? low_words : high_words;
    return _mm512_castsi512_ps((j & 1) == 0 ? _mm512_unpacklo_epi16(zero, words) : _mm512_unpackhi_epi16(zero, words));
  }
};
#else
// Without GFNI: the line as four Fp8Direct vectors.
struct Fp8Line {
  const uint8_t* p = nullptr;
  Fp8Line() = default;
  explicit Fp8Line(const uint8_t* bytes) : p(bytes) {}
  __m512 Vector(int j) const { return Fp8Direct(p + 16 * j); }
};
#endif

// DotTile for FP8 weight rows: out[r][k] = Σ_b scale[k][b] · Σ_{i in block b} x[r][i] · w[k][i].
// Each weight vector is widened once and used for every row. The block scale multiplies the 16
// lane sums of each 128-wide block once, not every weight vector: the widening, not the memory,
// bounds an FP8 GEMV on these CPUs, and one multiply fewer per 16 weights raises that ceiling
// (bench/linear_bench). Each (r, k) accumulates in the same order whatever the tile shape: lane l
// sums block b's products with i ≡ l mod 16 in order, adds that sum times the scale to its running
// total, and one reduction over the lanes ends it.
//
// kNanFree (rows without NaN encodings): every weight goes through Fp8Direct (one-row tiles with
// GFNI through Fp8Line, the same values in the same lanes), and x must hold the rows scaled by 2^112.
// Otherwise x is as given, and a 64-byte line of weights goes through the fp16 route (Fp8Fast) unless
// it holds a NaN encoding (checked per line, which costs a fraction of checking per vector), so NaN
// weights still give NaN. All give the same bits for the same rows.
template <int NR, int NK, bool kNanFree = false>
inline void DotTileFp8(const float* const* x, const uint8_t* const* w, const float* const* scale, int64_t n,
                       const uintptr_t* prefetch, float (*out)[kMaxTile]) {
  __m512 acc[NR][NK];    // [NR, NK] × 16 lanes: Σ over finished blocks of (lane sum · block scale)
  __m512 block[NR][NK];  // [NR, NK] × 16 lanes: this block's Σ x · (w · 2^-8)
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) acc[r][k] = block[r][k] = _mm512_setzero_ps();
  }
  auto step = [&](const __m512* wv, int64_t i, __mmask16 lanes) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = InRegister(_mm512_maskz_loadu_ps(lanes, x[r] + i));
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) block[r][k] = _mm512_fmadd_ps(wv[k], xv, block[r][k]);
    }
  };
  auto finish_block = [&](int64_t b) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) {
      const __m512 s = _mm512_set1_ps(scale[k][b] * kFp8Unscale);
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        acc[r][k] = _mm512_fmadd_ps(block[r][k], s, acc[r][k]);
        block[r][k] = _mm512_setzero_ps();
      }
    }
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if (prefetch != nullptr) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) Prefetch(prefetch[k] + i);
    }
    // The line's four vectors of 16 weights, each widened by `widen` and used for every row.
    auto line = [&](auto widen) __attribute__((always_inline)) {
      __m512 wv[NK];
#pragma GCC unroll 4
      for (int64_t c = 0; c < 64; c += 16) {
#pragma GCC unroll 4
        for (int k = 0; k < NK; ++k) wv[k] = widen(w[k] + i + c);
        step(wv, i + c, 0xFFFF);
      }
    };
    if constexpr (kNanFree && NR == 1) {
      Fp8Line lines[NK];
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) lines[k] = Fp8Line(w[k] + i);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512 wv[NK];
#pragma GCC unroll 4
        for (int k = 0; k < NK; ++k) wv[k] = lines[k].Vector(j);
        step(wv, i + 16 * j, 0xFFFF);
      }
    } else if constexpr (kNanFree) {
      line([](const uint8_t* p) __attribute__((always_inline)) { return Fp8Direct(p); });
    } else {
      bool nan = false;
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) nan |= Fp8LineHasNan(w[k] + i);
      if (__builtin_expect(!nan, 1)) {
        line([](const uint8_t* p) __attribute__((always_inline)) { return Fp8Fast(p); });
      } else {
        line([](const uint8_t* p) __attribute__((always_inline)) { return Fp8Careful(p); });
      }
    }
    if ((i + 64) % kFp8Block == 0) finish_block(i / kFp8Block);
  }
  for (; i < n; i += 16) {  // the last 1-63 weights, 16 at a time
    const __mmask16 lanes = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 wv[NK];
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) wv[k] = kNanFree ? Fp8Direct(w[k] + i, lanes) : Fp8Careful(w[k] + i, lanes);
    step(wv, i, lanes);
  }
  if (n % kFp8Block != 0) finish_block(n / kFp8Block);  // the partial last block
  ReduceTile<NR, NK>(acc, out);
}

// dst[i] = w[i] · scale[i / 128] for i < n: one FP8 weight row widened to f32 (equal, bit for bit,
// to F8E4M3ToF32(w[i]) · scale: the 2^-8 and 2^8 factors are exact, so the one rounding is that of
// the true product). The prefill GEMM and the loader use it; the small-row tiles scale per block.
inline void WidenFp8Row(const uint8_t* w, const float* scale, int64_t n, float* dst) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    if (i % kFp8Block == 0) s = _mm512_set1_ps(scale[i / kFp8Block] * kFp8Unscale);
    _mm512_mask_storeu_ps(dst + i, lanes, _mm512_mul_ps(Fp8Careful(w + i, lanes), s));
  }
}

// An FP8 row for the row kernels, read as WidenFp8Row forms it: element i is w[i] · scale[i / 128]
// rounded once, so FP8 rows give, bit for bit, what the same rows widened to f32 give. Each element is
// widened without its scale (Unscaled: Fp8Careful's w · 2^-8, exact, NaN encodings giving NaN), then
// multiplied by its block's scale times 2^8 (BlockScale). The tiles fetch BlockScale once per block
// of 128 and row (kBlockScaled), not once per vector: per vector, the scale's load, multiply and
// broadcast had cost about as much as the widening.
template <>
inline constexpr bool kBlockScaled<Fp8ScaledRow> = true;
inline __m512 Unscaled(const Fp8ScaledRow& row, int64_t i, __mmask16 mask = 0xFFFF) { return Fp8Careful(row.bytes + i, mask); }
inline __m512 BlockScale(const Fp8ScaledRow& row, int64_t i) {
  return _mm512_set1_ps(row.scale[i / kFp8Block] * kFp8Unscale);
}
// Elements i … i + 15 (they lie in one block), scaled.
inline __m512 LoadRow(const Fp8ScaledRow& row, int64_t i, __mmask16 mask = 0xFFFF) {
  return _mm512_mul_ps(Unscaled(row, i, mask), BlockScale(row, i));
}
#else
inline __m512 LoadRow(const Fp8ScaledRow& row, int64_t i, __mmask16 mask = 0xFFFF) {  // AVX-512 without BW/VL
  alignas(64) float v[16];
  for (int j = 0; j < 16; ++j) v[j] = (mask >> j) & 1 ? F8E4M3ToF32(row.bytes[i + j]) * row.scale[(i + j) / kFp8Block] : 0.0f;
  return _mm512_load_ps(v);
}
#endif

// out[r][k] = Σ_{i<n} x[r][i] · w[k][i] for an NR × NK tile. Each (r, k) pair accumulates in
// 16 lanes (lane l takes i ≡ l mod 16, in order), then a masked tail, then one reduction
// (ReduceLanes): the same order for every tile shape. When `prefetch` is given, the line at
// prefetch[k] + (bytes of w[k] read so far) is prefetched as each new line of w[k] is reached;
// addresses are integers, so they may point past any allocation (a prefetch never faults).
template <int NR, int NK, typename Row>
inline void DotTile(const float* const* x, const Row* w, int64_t n, const uintptr_t* prefetch,
                    float (*out)[kMaxTile]) {
  constexpr int64_t kElementsPerLine = 64 / kRowElementBytes<Row>;
  // f32 weight rows (attention's cache rows, the indexer's keys) hold both vectors in registers:
  // folded, a 4 × 4 tile was bound by its loads. bf16 rows are widened in registers anyway, and keep x
  // folded into their multiply-adds: held, x made the bf16 GEMV of one and of three rows stream from
  // memory more slowly (bench/linear_bench, beside the folded build).
  constexpr bool kHoldWeights = std::is_same_v<Row, const float*>;
  constexpr bool kHoldX = kHoldWeights && NR > 1;
  __m512 acc[NR][NK];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_setzero_ps();
  }
  __m512 block_scale[NK];  // block-scaled rows (FP8): the scales of the block i lies in
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (prefetch != nullptr && i % kElementsPerLine == 0) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) Prefetch(prefetch[k] + i * kRowElementBytes<Row>);
    }
    __m512 wv[NK];
    if constexpr (kBlockScaled<Row>) {
      if (i % kFp8Block == 0) {  // a new block: its scales, once
#pragma GCC unroll 4
        for (int k = 0; k < NK; ++k) block_scale[k] = BlockScale(w[k], i);
      }
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) wv[k] = _mm512_mul_ps(Unscaled(w[k], i), block_scale[k]);
    } else {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) wv[k] = kHoldWeights ? InRegister(LoadRow(w[k], i)) : LoadRow(w[k], i);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = kHoldX ? InRegister(_mm512_loadu_ps(x[r] + i)) : _mm512_loadu_ps(x[r] + i);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_fmadd_ps(wv[k], xv, acc[r][k]);
    }
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 wv[NK];
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) wv[k] = LoadRow(w[k], i, mask);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x[r] + i);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) acc[r][k] = _mm512_fmadd_ps(wv[k], xv, acc[r][k]);
    }
  }
  ReduceTile<NR, NK>(acc, out);
}

// y[r][c] = Σ_{k<n} x[r][k] · w[k][col0 + c] for NR rows and NV vectors of 16 columns starting at
// col0, or y[r][c] + Σ … when `accumulate`; the last vector covers only the columns in `last_mask`.
// Each output accumulates with one FMA per k, in k order, whatever NR and NV, so a sum carried
// through y from one call to the next (over rows k0 … k1, then k1 … k2) has the bits of one call
// over all of them. `prefetch_rows` ≥ 0 prefetches the same columns of w[k + prefetch_rows] while
// row k is used (skipped past the last row). Block-scaled rows (FP8) need the tile's columns to lie in
// one block of 128.
template <int NR, int NV, typename Row>
inline void CombineTile(const float* const* x, const Row* w, int64_t n, int64_t col0, __mmask16 last_mask,
                        int64_t prefetch_rows, bool accumulate, float* const* y) {
  constexpr int64_t kLines = (NV * 16 * kRowElementBytes<Row> + 63) / 64;
  __m512 acc[NR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    if (accumulate) {
#pragma GCC unroll 16
      for (int v = 0; v < NV - 1; ++v) acc[r][v] = _mm512_loadu_ps(y[r] + col0 + 16 * v);
      acc[r][NV - 1] = _mm512_maskz_loadu_ps(last_mask, y[r] + col0 + 16 * (NV - 1));
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    if (prefetch_rows >= 0 && k + prefetch_rows < n) {
      const uintptr_t ahead = RowAddress(w[k + prefetch_rows], col0);
#pragma GCC unroll 16
      for (int64_t line = 0; line < kLines; ++line) Prefetch(ahead + line * 64);
    }
    __m512 wv[NV];
    if constexpr (kBlockScaled<Row>) {
      const __m512 block_scale = BlockScale(w[k], col0);  // the tile lies in one block
#pragma GCC unroll 16
      for (int v = 0; v < NV - 1; ++v) wv[v] = _mm512_mul_ps(Unscaled(w[k], col0 + 16 * v), block_scale);
      wv[NV - 1] = _mm512_mul_ps(Unscaled(w[k], col0 + 16 * (NV - 1), last_mask), block_scale);
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < NV - 1; ++v) wv[v] = LoadRow(w[k], col0 + 16 * v);
      wv[NV - 1] = LoadRow(w[k], col0 + 16 * (NV - 1), last_mask);
    }
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
#endif
// An FP8 row's element i times its block's scale (the portable kernels' reading of Fp8ScaledRow).
inline float WeightAt(const Fp8ScaledRow& w, int64_t i) { return F8E4M3ToF32(w.bytes[i]) * w.scale[i / kFp8Block]; }

#if !defined(MTPSPEC_FP8_SIMD)
inline void WidenFp8Row(const uint8_t* w, const float* scale, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(w[i]) * scale[i / kFp8Block];
}

// FP8 without AVX-512 BW/VL: each weight widened through the scalar conversion; as in the SIMD
// tile, each 128-wide block's sum is scaled once.
template <int NR, int NK, bool kNanFree = false>
inline void DotTileFp8(const float* const* x, const uint8_t* const* w, const float* const* scale, int64_t n,
                       const uintptr_t* /*prefetch*/, float (*out)[kMaxTile]) {
  static_assert(!kNanFree, "the scaled-input FP8 tile (Fp8Direct) needs AVX-512 BW/VL");
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < NK; ++k) {
      float acc = 0.0f;
      for (int64_t b0 = 0; b0 < n; b0 += kFp8Block) {
        const int64_t b1 = std::min(n, b0 + kFp8Block);
        float block = 0.0f;
        for (int64_t i = b0; i < b1; ++i) block += x[r][i] * F8E4M3ToF32(w[k][i]);
        acc += block * scale[k][b0 / kFp8Block];
      }
      out[r][k] = acc;
    }
  }
}
#endif
#if !defined(__AVX512F__)

template <int NR, int NK, typename Row>
inline void DotTile(const float* const* x, const Row* w, int64_t n, const uintptr_t* /*prefetch*/,
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
