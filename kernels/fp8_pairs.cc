#include "kernels/fp8_pairs.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "core/status.h"
#include "kernels/fp8_pair_tiles.h"

namespace mtpspec {
namespace {

constexpr uint16_t kNanWord = 0x7FC0;       // a bf16 quiet NaN
constexpr float kCodeFloor = 0x1p-100f;     // codes below this become 0
constexpr int kTopExponent = 99;            // e = kTopExponent − ⌊log2 max|x|⌋

// The row's power of two e (kernels/fp8_pairs.h) from its largest finite magnitude; at most 126, so
// that 2^-e is a normal float.
int RowExponent(float max_abs) { return max_abs == 0.0f ? 0 : std::min(126, kTopExponent - std::ilogb(max_abs)); }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
inline __mmask16 Lanes(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

// v rounded to e4m3's precision, as f32 (|v| ≤ 448): the nearest value with 3 mantissa bits, ties to
// even, for |v| ≥ 2^-6 (a carry moves into the exponent); the nearest multiple of 2^-9 below that
// (e4m3's subnormals; roundscale of a negative value that rounds to 0 gives -0, as the scalar
// conversion does).
inline __m512 RoundToE4m3(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 20), _mm512_set1_epi32(1));
  const __m512i normal = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), odd)),
                                          _mm512_set1_epi32(static_cast<int>(0xFFF00000u)));
  const __m512 sub = _mm512_mul_ps(
      _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm512_set1_ps(0x1p-9f));
  const __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(_mm512_castsi512_ps(normal), small, sub);
}

// The bf16 words of 16 codes c (f32 values): rounded to nearest even (exact where c already is a
// bf16 value), those below kCodeFloor set to ±0.
inline __m256i CodeWords(__m512 c) {
  const __m512i bits = _mm512_castps_si512(c);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
  const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(c), _mm512_set1_ps(kCodeFloor), _CMP_LT_OQ);
  const __m512i words = _mm512_mask_mov_epi32(rounded, tiny, _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16));
}

// Stores 16 words for elements e … e + 15 of a row (e a multiple of 16) where the line layout wants
// them: words e/16 · 8 … and 32 + e/16 · 8 … of their line.
inline void StoreWords(__m256i words, int64_t element, uint16_t* row_words) {
  uint16_t* line = row_words + (element / kPairLine) * kPairLine;
  const int64_t q = (element % kPairLine) / 16;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(line + 8 * q), _mm256_castsi256_si128(words));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(line + 32 + 8 * q), _mm256_extracti128_si256(words, 1));
}

// One row x [in] into its words [lines · 64]; returns e.
int PrepareRow(const float* x, int64_t in, ActivationPrecision precision, uint16_t* row_words) {
  __m512 peak = _mm512_setzero_ps();  // the largest finite magnitude
  for (int64_t i = 0; i < in; i += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(Lanes(in - i), x + i));
    peak = _mm512_mask_max_ps(peak, _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_LT_OQ), peak, a);
  }
  const int e = RowExponent(_mm512_reduce_max_ps(peak));
  for (int64_t first = 0; first < in; first += kFp8Block) {
    const int64_t n = std::min(kFp8Block, in - first);
    const float* g = x + first;
    __m512 group_peak = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 lanes = Lanes(n - i);
      const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes, g + i));
      bad |= _mm512_mask_cmp_ps_mask(lanes, a, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);  // ∞ or NaN
      group_peak = _mm512_max_ps(group_peak, a);
    }
    if (bad != 0) {
      for (int64_t i = 0; i < n; i += 16) {
        StoreWords(_mm256_maskz_mov_epi16(Lanes(n - i), _mm256_set1_epi16(static_cast<short>(kNanWord))), first + i, row_words);
      }
      continue;
    }
    // kFp8: x / s, rounded, times s · 2^e; kBf16: x · 2^e, rounded by CodeWords. All scalings are by
    // powers of two (scalef), so exact.
    const int s = precision == ActivationPrecision::kFp8 ? std::ilogb(Fp8GroupScale(_mm512_reduce_max_ps(group_peak))) : 0;
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(Lanes(n - i), g + i);
      __m512 c;
      if (precision == ActivationPrecision::kFp8) {
        const __m512 rounded = RoundToE4m3(_mm512_scalef_ps(v, _mm512_set1_ps(static_cast<float>(-s))));
        c = _mm512_scalef_ps(rounded, _mm512_set1_ps(static_cast<float>(s + e)));
      } else {
        c = _mm512_scalef_ps(v, _mm512_set1_ps(static_cast<float>(e)));
      }
      StoreWords(CodeWords(c), first + i, row_words);
    }
  }
  return e;
}
#else
// The bf16 word of a code c = q · 2^e, ±0 below kCodeFloor.
uint16_t CodeWord(float c) {
  if (std::fabs(c) < kCodeFloor) return std::signbit(c) ? 0x8000 : 0;
  return F32ToBf16(c);
}

int PrepareRow(const float* x, int64_t in, ActivationPrecision precision, uint16_t* row_words) {
  float max_abs = 0.0f;
  for (int64_t i = 0; i < in; ++i) {
    if (std::isfinite(x[i])) max_abs = std::max(max_abs, std::fabs(x[i]));
  }
  const int e = RowExponent(max_abs);
  for (int64_t first = 0; first < in; first += kFp8Block) {
    const int64_t n = std::min(kFp8Block, in - first);
    bool bad = false;
    float group_max = 0.0f;
    for (int64_t i = first; i < first + n; ++i) {
      bad |= !std::isfinite(x[i]);
      group_max = std::max(group_max, std::fabs(x[i]));
    }
    const int s = precision == ActivationPrecision::kFp8 && !bad ? std::ilogb(Fp8GroupScale(group_max)) : 0;
    for (int64_t i = first; i < first + n; ++i) {
      uint16_t word = kNanWord;
      if (!bad) {
        const float q = precision == ActivationPrecision::kFp8
                            ? std::ldexp(F8E4M3ToF32(F32ToF8E4M3(std::ldexp(x[i], -s))), s)
                            : Bf16ToF32(F32ToBf16(x[i]));
        word = CodeWord(std::ldexp(q, e));
      }
      row_words[(i / kPairLine) * kPairLine + PairWordOfElement(i % kPairLine)] = word;
    }
  }
  return e;
}
#endif

struct PairWordTable {
  uint16_t words[256];
  PairWordTable() {
    for (int b = 0; b < 256; ++b) {
      const auto byte = static_cast<uint8_t>(b);
      words[b] = (b & 0x7F) == 0x7F ? static_cast<uint16_t>(kNanWord | (b & 0x80) << 8)
                                    : F32ToBf16(F8E4M3ToF32(byte) * 0x1p-8f);
    }
  }
};

}  // namespace

uint16_t Fp8PairWord(uint8_t byte) {
  static const PairWordTable table;
  return table.words[byte];
}

Tensor Fp8PairLinesToFix(const TensorView& w) {
  MTPSPEC_CHECK(w.dtype == DType::kF8E4M3 && w.ndim == 2 && w.stride[1] == 1);
  const int64_t rows = w.shape[0], full_lines = w.shape[1] / kPairLine;
  const int64_t words = std::max<int64_t>(1, (full_lines + 63) / 64);
  Tensor flags = Tensor::Zeros(DType::kI64, {rows, words});
  auto* bits = reinterpret_cast<uint64_t*>(flags.data<int64_t>());
  for (int64_t o = 0; o < rows; ++o) {
    const uint8_t* row = w.as<uint8_t>() + o * w.stride[0];
    for (int64_t j = 0; j < full_lines; ++j) {
#if defined(__AVX512BW__)
      const __m512i b = _mm512_loadu_si512(row + j * kPairLine);
      const bool fix = (_mm512_testn_epi8_mask(b, _mm512_set1_epi8(0x78)) |
                        _mm512_cmpeq_epi8_mask(_mm512_and_si512(b, _mm512_set1_epi8(0x7F)), _mm512_set1_epi8(0x7F))) != 0;
#else
      bool fix = false;
      for (int64_t i = 0; i < kPairLine; ++i) {
        const uint8_t b = row[j * kPairLine + i];
        fix |= (b & 0x78) == 0 || (b & 0x7F) == 0x7F;
      }
#endif
      if (fix) bits[o * words + j / 64] |= uint64_t{1} << (j % 64);
    }
  }
  return flags;
}

uint16_t Fp8PairInput::Code(int64_t r, int64_t i) const {
  const auto* words = reinterpret_cast<const uint16_t*>(Row(r));
  return words[(i / kPairLine) * kPairLine + PairWordOfElement(i % kPairLine)];
}

void PrepareFp8PairInput(const float* x, int64_t rows, int64_t in, ActivationPrecision precision, Fp8PairInput* out,
                         ThreadPool* pool) {
  MTPSPEC_CHECK(precision != ActivationPrecision::kF32);
  out->rows = rows;
  out->in = in;
  out->lines = (in + kPairLine - 1) / kPairLine;
  out->pairs.assign(rows * out->lines * 32, 0u);
  out->unscale.resize(rows);
  const auto prepare = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      auto* words = reinterpret_cast<uint16_t*>(out->pairs.data() + r * out->lines * 32);
      out->unscale[r] = std::ldexp(1.0f, -PrepareRow(x + r * in, in, precision, words));
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(rows, 16, prepare);
  } else {
    prepare(0, rows);
  }
}

void PrepareReducedInput(const float* x, int64_t rows, const TensorView& w, bool gemm, Fp8ReducedInput* out,
                         ThreadPool* pool) {
  PrepareFp8PairInput(x, rows, w.shape[1], w.activations, &out->codes, pool);
  out->values.clear();
  out->gemm = PairGemmInput();
  if (gemm) {
    PreparePairGemmInput(out->codes, &out->gemm, pool);
    return;
  }
#if defined(MTPSPEC_FP8_PAIRS_SIMD)
  const bool pair_tiles = true;
#else
  const bool pair_tiles = false;
#endif
  if (!pair_tiles || w.dtype == DType::kBF16) {
    out->values.resize(rows * w.shape[1]);
    DequantiseFp8PairInput(out->codes, out->values.data());
  }
}

void DequantiseFp8PairInput(const Fp8PairInput& input, float* out) {
  for (int64_t r = 0; r < input.rows; ++r) {
    for (int64_t i = 0; i < input.in; ++i) out[r * input.in + i] = Bf16ToF32(input.Code(r, i)) * input.unscale[r];
  }
}

}  // namespace mtpspec
