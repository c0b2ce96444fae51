// The small-row tile of a Linear with FP8 weights whose input rows are bf16 or fp8 codes
// (ActivationPrecision::kBf16 / kFp8; the arithmetic is described in kernels/fp8_pairs.h). Internal
// header of kernels/linear.cc and its tests.
//
// A 64-byte line of weights becomes two vectors of 32 bf16 words, each word the weight's value times
// 2^-8: with GFNI, one bit-matrix product builds every word's top byte (sign, then 0111 and the top
// three exponent bits: e4m3's bias 7 against bf16's 127 less 8) and one its low byte (the last
// exponent bit and the mantissa), and two byte unpacks pair them. That is 4 vector operations per 64
// weights against the f32 tiles' 9 (kernels/simd_tiles.h, Fp8Line). A pair product instruction does
// 32 multiply-adds against an f32 multiply-add's 16, but on the Zen 4 cores measured here it issues at
// half the rate, so the multiply-adds cost the same and the saving is the widening (1.3-1.6x on
// bench/linear_bench's resident matrix, docs/results/numerics.md). The bit placement is wrong for bytes whose
// exponent field is 0 (zeros and subnormals: bf16 would need its exponent rebiased) and for the NaN
// codes, so a line holding any of them has those bytes replaced by table lookups (about 1% of the
// lines of a release-like matrix).
#pragma once

#include <cstdint>

#include "kernels/fp8_pairs.h"
#include "kernels/simd_tiles.h"

namespace mtpspec::tiles {

#if defined(MTPSPEC_FP8_SIMD)
#define MTPSPEC_FP8_PAIRS_SIMD 1

// acc + the pair products of w and x in each 32-bit lane: the odd elements' product added and
// rounded, then the even elements'. VDPBF16PS computes that chain where the CPU has it; two f32
// multiply-adds per lane compute it bit for bit otherwise (no operand or sum here is subnormal,
// which the instruction would flush: kernels/fp8_pairs.h).
inline __m512 PairProductsFma(__m512 acc, __m512i w, __m512i x) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, high)), _mm512_castsi512_ps(_mm512_and_si512(x, high)), acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), acc);
}
inline __m512 PairProducts(__m512 acc, __m512i w, __m512i x) {
#if defined(__AVX512BF16__)
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(x));
#else
  return PairProductsFma(acc, w, x);
#endif
}

// The words of a 64-byte line: `low` holds elements 16q + t with t < 8 of each 128-bit lane q, `high`
// those with t ≥ 8, in the order PairWordOfElement gives.
struct Fp8PairLine {
  __m512i low, high;
};

// Each byte's word as two bytes, in the byte's position: `top` (the sign and the exponent's top seven
// bits) and `bottom` (the exponent's last bit and the mantissa).
struct Fp8PairBytes {
  __m512i top, bottom;
};

// The two bytes of every word, by shifts and masks (CPUs without GFNI, and the tests' reference):
// top = sign | 0x38 | exponent bits 3-1, bottom = exponent bit 0 and the mantissa, shifted up by 4.
// Right for bytes whose exponent field is not 0 and that are not NaN codes (FixPairBytes, below).
inline Fp8PairBytes PairBytesByShifts(__m512i bytes) {
  const __m512i exponent_top = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), _mm512_set1_epi8(0x07));
  const __m512i top = _mm512_or_si512(
      _mm512_or_si512(_mm512_and_si512(bytes, _mm512_set1_epi8(static_cast<char>(0x80))), _mm512_set1_epi8(0x38)),
      exponent_top);
  return {top, _mm512_and_si512(_mm512_slli_epi16(bytes, 4), _mm512_set1_epi8(static_cast<char>(0xF0)))};
}
inline Fp8PairBytes PairBytesFast(__m512i bytes) {
#if defined(__GFNI__)
  // Matrix row i (byte 7 − i of the qword) selects the source bits of output bit i. Top byte: bit 7 ←
  // the sign, bits 2-0 ← exponent bits 3-1 (byte bits 6-4), bits 5-3 set by the constant 0x38. Bottom
  // byte: bit 7 ← exponent bit 0 (byte bit 3), bits 6-4 ← the mantissa (byte bits 2-0).
  return {_mm512_gf2p8affine_epi64_epi8(bytes, _mm512_set1_epi64(0x1020400000000080LL), 0x38),
          _mm512_gf2p8affine_epi64_epi8(bytes, _mm512_set1_epi64(0x0000000001020408LL), 0)};
#else
  return PairBytesByShifts(bytes);
#endif
}
// The bytes PairBytesFast gets wrong: exponent field 0 (zeros and subnormals, whose bf16 words need
// a rebiased exponent), and, unless the matrix is known free of them, the NaN codes.
template <bool kNanFree>
inline __mmask64 PairBytesToFix(__m512i bytes) {
  __mmask64 fix = _mm512_testn_epi8_mask(bytes, _mm512_set1_epi8(0x78));
  if constexpr (!kNanFree) {
    fix |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(bytes, _mm512_set1_epi8(0x7F)), _mm512_set1_epi8(0x7F));
  }
  return fix;
}
// Corrects the bytes PairBytesToFix marks: a subnormal m · 2^-9 (m < 8, zero included) has the word of
// m · 2^-17, looked up by m from 16-entry tables (one per 128-bit lane, vpshufb); a NaN code becomes
// the quiet NaN 0x7FC0. The sign stays.
inline void FixPairBytes(__m512i bytes, __mmask64 fix, Fp8PairBytes* pair) {
  const __m512i top_of_m = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x37, 0x37, 0x37, 0x38, 0x38, 0x38, 0x38,  //
                                                                0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F));
  const __m512i bottom_of_m = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xC0),
                                                                   0x00, 0x20, 0x40, 0x60,  //
                                                                   static_cast<char>(0xC0), static_cast<char>(0xC0),
                                                                   static_cast<char>(0xC0), static_cast<char>(0xC0),
                                                                   static_cast<char>(0xC0), static_cast<char>(0xC0),
                                                                   static_cast<char>(0xC0), static_cast<char>(0xC0)));
  // Index: the mantissa, plus 8 for a NaN code (exponent field 15); the marked bytes have no others.
  const __m512i index = _mm512_and_si512(bytes, _mm512_set1_epi8(0x0F));
  const __m512i sign = _mm512_and_si512(bytes, _mm512_set1_epi8(static_cast<char>(0x80)));
  pair->top = _mm512_mask_mov_epi8(pair->top, fix, _mm512_or_si512(_mm512_shuffle_epi8(top_of_m, index), sign));
  pair->bottom = _mm512_mask_mov_epi8(pair->bottom, fix, _mm512_shuffle_epi8(bottom_of_m, index));
}
inline Fp8PairLine PairLineOf(const Fp8PairBytes& pair) {
  return {_mm512_unpacklo_epi8(pair.bottom, pair.top), _mm512_unpackhi_epi8(pair.bottom, pair.top)};
}
// The words of the line's bytes: every byte, zeros, subnormals and NaN codes included (kNanFree: the
// bytes hold no NaN code).
template <bool kNanFree>
inline Fp8PairLine PairLine(__m512i bytes) {
  Fp8PairBytes pair = PairBytesFast(bytes);
  const __mmask64 fix = PairBytesToFix<kNanFree>(bytes);
  if (__builtin_expect(fix != 0, 0)) FixPairBytes(bytes, fix, &pair);
  return PairLineOf(pair);
}

// out[r][k] = Σ_b scale[k][b] · 2^8 · Σ_{i in block b} code[r][i] · word[k][i], in the order of
// kernels/fp8_pairs.h: per line the low words, then the high; a block's lane sums multiply-added with
// the weight block's scale times 2^8; the lanes reduced last (ReduceTile). The row's 2^-e is the
// caller's. Each (r, k) sums in that order whatever NR and NK are.
//
// `fix` (optional: each weight row's Fp8PairLinesToFix bits) says which full lines hold bytes to fix,
// so the others skip the check; without it every line is checked (kNanFree: for zeros and
// subnormals only).
template <int NR, int NK, bool kNanFree>
inline void DotTileFp8Pairs(const uint32_t* const* x, const uint8_t* const* w, const float* const* scale, int64_t n,
                            const uint64_t* const* fix, const uintptr_t* prefetch, float (*out)[kMaxTile]) {
  __m512 acc[NR][NK];    // [NR, NK] × 16 lanes: Σ over finished blocks
  __m512 block[NR][NK];  // [NR, NK] × 16 lanes: this block's pair products
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) acc[r][k] = block[r][k] = _mm512_setzero_ps();
  }
  auto step = [&](const Fp8PairLine* lines, int64_t line) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512i* pairs = reinterpret_cast<const __m512i*>(x[r] + line * (kPairLine / 2));
      const __m512i low = _mm512_load_si512(pairs), high = _mm512_load_si512(pairs + 1);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) block[r][k] = PairProducts(block[r][k], lines[k].low, low);
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) block[r][k] = PairProducts(block[r][k], lines[k].high, high);
    }
  };
  auto finish_block = [&](int64_t b) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int k = 0; k < NK; ++k) {
      const __m512 weight_scale = _mm512_set1_ps(scale[k][b] * kFp8Unscale);
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        acc[r][k] = _mm512_fmadd_ps(block[r][k], weight_scale, acc[r][k]);
        block[r][k] = _mm512_setzero_ps();
      }
    }
  };
  Fp8PairLine lines[NK];
  int64_t i = 0;
  for (; i + kPairLine <= n; i += kPairLine) {
    if (prefetch != nullptr) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) Prefetch(prefetch[k] + i);
    }
    const int64_t line = i / kPairLine;
    if (fix != nullptr) {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) {
        const __m512i bytes = _mm512_loadu_si512(w[k] + i);
        if (__builtin_expect((fix[k][line / 64] >> (line % 64)) & 1, 0)) {
          lines[k] = PairLine<false>(bytes);
        } else {
          lines[k] = PairLineOf(PairBytesFast(bytes));
        }
      }
    } else {
#pragma GCC unroll 4
      for (int k = 0; k < NK; ++k) lines[k] = PairLine<kNanFree>(_mm512_loadu_si512(w[k] + i));
    }
    step(lines, line);
    if ((i + kPairLine) % kFp8Block == 0) finish_block(i / kFp8Block);
  }
  if (i < n) {  // the last 1-63 weights; the zero bytes past them give zero words
    const __mmask64 bytes = (__mmask64{1} << (n - i)) - 1;
    for (int k = 0; k < NK; ++k) lines[k] = PairLine<kNanFree>(_mm512_maskz_loadu_epi8(bytes, w[k] + i));
    step(lines, i / kPairLine);
  }
  if (n % kFp8Block != 0) finish_block(n / kFp8Block);  // the partial last block
  ReduceTile<NR, NK>(acc, out);
}

#endif  // MTPSPEC_FP8_SIMD

}  // namespace mtpspec::tiles
