#include "kernels/pair_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/parallel.h"
#include "core/status.h"
#include "kernels/bf16_pairs.h"
#include "kernels/fp8_pairs.h"

namespace mtpspec {
namespace {

constexpr int kOutGroup = 6;         // outputs a micro-tile broadcasts against one row tile
constexpr int64_t kOutChunk = 48;    // outputs widened together (8 groups)
constexpr int64_t kBlockPairs = 64;  // pairs per 128-wide scale block
constexpr int64_t kSlabPairs = 4 * kBlockPairs;  // pairs of a row tile the chunk's groups take in turn
constexpr int kLaneRows = 16;        // rows per AVX-512 vector
constexpr int kTileVectors = kPairGemmTileRows / kLaneRows;

thread_local int forced_isa = -1;  // a PairGemmIsaScope's choice, or -1

// What one micro-tile reads: pairs [p_begin, p_end) of the row tile (p_begin a multiple of
// kBlockPairs), of `no` weight rows and of their scale rows (each already times 2^8), and the running
// totals it adds those blocks into ([kOutGroup, 64], in block order: a call continues the previous
// call's blocks).
struct MicroTile {
  const uint32_t* xt;               // [pairs, 64]
  int64_t p_begin, p_end;
  const uint32_t* w[kOutGroup];     // [pairs] each
  const float* scale[kOutGroup];    // [⌈pairs / 64⌉] each, · 2^8
  float* total;                     // [kOutGroup, 64]
};

// ---- scalar: the specification of the order ----
void MicroScalar(const MicroTile& m, int no, int rows) {
  for (int o = 0; o < no; ++o) {
    for (int r = 0; r < rows; ++r) {
      float total = m.total[o * kPairGemmTileRows + r];
      for (int64_t p0 = m.p_begin; p0 < m.p_end; p0 += kBlockPairs) {
        const int64_t p1 = std::min(p0 + kBlockPairs, m.p_end);
        float acc = 0.0f;
        for (int64_t p = p0; p < p1; ++p) acc = Bf16PairStep(acc, m.xt[p * kPairGemmTileRows + r], m.w[o][p]);
        total = std::fma(acc, m.scale[o][p0 / kBlockPairs], total);
      }
      m.total[o * kPairGemmTileRows + r] = total;
    }
  }
}

// ---- AVX2: the same chain, two multiply-adds per pair, 8 rows per vector ----
__attribute__((target("avx2,fma"))) void MicroAvx2(const MicroTile& m, int no, int rows) {
  const __m256i high_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const int vectors = (rows + 7) / 8;
  for (int o = 0; o < no; ++o) {
    for (int v0 = 0; v0 < vectors; v0 += 2) {
      const int nv = std::min(2, vectors - v0);
      __m256 total[2];
      for (int v = 0; v < nv; ++v) total[v] = _mm256_loadu_ps(m.total + o * kPairGemmTileRows + 8 * (v0 + v));
      for (int64_t p0 = m.p_begin; p0 < m.p_end; p0 += kBlockPairs) {
        const int64_t p1 = std::min(p0 + kBlockPairs, m.p_end);
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t p = p0; p < p1; ++p) {
          const __m256i wp = _mm256_set1_epi32(static_cast<int>(m.w[o][p]));
          const __m256 w_hi = _mm256_castsi256_ps(_mm256_and_si256(wp, high_mask));
          const __m256 w_lo = _mm256_castsi256_ps(_mm256_slli_epi32(wp, 16));
          for (int v = 0; v < nv; ++v) {
            const __m256i xp = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(m.xt + p * kPairGemmTileRows + 8 * (v0 + v)));
            acc[v] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(xp, high_mask)), w_hi, acc[v]);
            acc[v] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(xp, 16)), w_lo, acc[v]);
          }
        }
        const __m256 s = _mm256_set1_ps(m.scale[o][p0 / kBlockPairs]);
        for (int v = 0; v < nv; ++v) total[v] = _mm256_fmadd_ps(acc[v], s, total[v]);
      }
      for (int v = 0; v < nv; ++v) _mm256_storeu_ps(m.total + o * kPairGemmTileRows + 8 * (v0 + v), total[v]);
    }
  }
}

// ---- AVX-512 BF16: NO outputs × RV vectors of 16 rows, one VDPBF16PS per (output, vector, pair) ----
template <int NO, int RV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void MicroAvx512(const MicroTile& m) {
  for (int64_t p0 = m.p_begin; p0 < m.p_end; p0 += kBlockPairs) {
    const int64_t p1 = std::min(p0 + kBlockPairs, m.p_end);
    __m512 acc[NO][RV];
    for (int o = 0; o < NO; ++o) {
      for (int v = 0; v < RV; ++v) acc[o][v] = _mm512_setzero_ps();
    }
    for (int64_t p = p0; p < p1; ++p) {
      __m512bh x[RV];
      for (int v = 0; v < RV; ++v) {
        x[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(m.xt + p * kPairGemmTileRows + kLaneRows * v));
      }
      for (int o = 0; o < NO; ++o) {
        const __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(m.w[o][p])));
        for (int v = 0; v < RV; ++v) acc[o][v] = _mm512_dpbf16_ps(acc[o][v], x[v], w);
      }
    }
    for (int o = 0; o < NO; ++o) {
      const __m512 s = _mm512_set1_ps(m.scale[o][p0 / kBlockPairs]);
      for (int v = 0; v < RV; ++v) {
        float* t = m.total + o * kPairGemmTileRows + kLaneRows * v;
        _mm512_storeu_ps(t, _mm512_fmadd_ps(acc[o][v], s, _mm512_loadu_ps(t)));
      }
    }
    // The totals stay in memory between blocks: held in registers beside the accumulators, they
    // would push the accumulators out to the stack.
    asm volatile("" ::: "memory");
  }
}

template <int NO>
void MicroAvx512Rows(const MicroTile& m, int rows) {
  switch ((rows + kLaneRows - 1) / kLaneRows) {
    case 1: return MicroAvx512<NO, 1>(m);
    case 2: return MicroAvx512<NO, 2>(m);
    case 3: return MicroAvx512<NO, 3>(m);
    default: return MicroAvx512<NO, kTileVectors>(m);
  }
}

void MicroAvx512Any(const MicroTile& m, int no, int rows) {
  switch (no) {
    case 1: return MicroAvx512Rows<1>(m, rows);
    case 2: return MicroAvx512Rows<2>(m, rows);
    case 3: return MicroAvx512Rows<3>(m, rows);
    case 4: return MicroAvx512Rows<4>(m, rows);
    case 5: return MicroAvx512Rows<5>(m, rows);
    default: return MicroAvx512Rows<kOutGroup>(m, rows);
  }
}

// Fp8PairWord of every byte, by the byte.
const std::array<uint16_t, 256>& Fp8PairWords() {
  alignas(64) static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> words{};
    for (int b = 0; b < 256; ++b) words[b] = Fp8PairWord(static_cast<uint8_t>(b));
    return words;
  }();
  return table;
}

// The words of one FP8 weight row in natural pairs, [⌈in / 2⌉] (an odd `in` pads with 0).
void WidenRowToPairs(const uint8_t* w, int64_t in, uint32_t* out) {
  const std::array<uint16_t, 256>& words = Fp8PairWords();
  const int64_t full = in / 2;
  for (int64_t p = 0; p < full; ++p) out[p] = words[w[2 * p]] | static_cast<uint32_t>(words[w[2 * p + 1]]) << 16;
  if (in % 2 != 0) out[full] = words[w[in - 1]];
}

// The shift that puts a bf16 row's largest magnitude (its bits without the sign) in [1, 2): 0 for a
// row of zeros and for a row holding an infinity or a NaN.
int Bf16RowShift(uint16_t largest_magnitude) {
  const int top = largest_magnitude >> 7;  // its biased exponent
  return top == 0 || top == 0xff ? 0 : 127 - top;
}

// A bf16 weight's word times 2^shift; ±0 where that falls below 2^-26; infinities and NaNs as they are.
uint16_t ScaledBf16Word(uint16_t bits, int shift) {
  const int exponent = (bits >> 7) & 0xff;
  if (exponent == 0xff) return bits;
  if (exponent == 0 || exponent + shift < 127 - 26) return bits & 0x8000u;
  return static_cast<uint16_t>(bits + shift * 128);
}

// The words of one bf16 weight row in natural pairs, [⌈in / 2⌉], each weight times 2^shift so that
// the row's largest magnitude lies in [1, 2): the products with the codes (below 2^100) stay below
// 2^101, as an FP8 weight's do. Weights that come out below 2^-26 become ±0, so that every product
// with a code (at least 2^-100) is a normal f32 value, which VDPBF16PS and the f32 multiply-adds
// treat alike. A row holding an infinity or a NaN keeps its words (shift 0) and its outputs are not
// finite. Returns shift; the outputs are multiplied by 2^-shift at the end.
int WidenBf16RowToPairs(const uint16_t* w, int64_t in, uint32_t* out) {
  uint16_t largest = 0;  // magnitude bits
  for (int64_t i = 0; i < in; ++i) largest = std::max<uint16_t>(largest, w[i] & 0x7fffu);
  const int shift = Bf16RowShift(largest);
  auto* words = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < in; ++i) words[i] = ScaledBf16Word(w[i], shift);
  if (in % 2 != 0) words[in] = 0;
  return shift;
}

// WidenBf16RowToPairs, 32 words per step (the same bits: integer operations only).
__attribute__((target("avx512f,avx512bw"))) int WidenBf16RowToPairsAvx512(const uint16_t* w, int64_t in,
                                                                           uint32_t* out) {
  const __m512i magnitude_bits = _mm512_set1_epi16(0x7fff);
  __m512i largest32 = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) {
    largest32 = _mm512_max_epu16(largest32, _mm512_and_si512(_mm512_loadu_si512(w + i), magnitude_bits));
  }
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, largest32);
  uint16_t largest = 0;
  for (uint16_t lane : lanes) largest = std::max(largest, lane);
  for (; i < in; ++i) largest = std::max<uint16_t>(largest, w[i] & 0x7fffu);
  const int shift = Bf16RowShift(largest);
  const __m512i exponent_field = _mm512_set1_epi16(0xff), sign = _mm512_set1_epi16(static_cast<int16_t>(0x8000));
  const __m512i shift16 = _mm512_set1_epi16(static_cast<int16_t>(shift)), smallest_kept = _mm512_set1_epi16(127 - 26);
  const __m512i step = _mm512_set1_epi16(static_cast<int16_t>(shift * 128));
  auto* words = reinterpret_cast<uint16_t*>(out);
  for (i = 0; i + 32 <= in; i += 32) {
    const __m512i bits = _mm512_loadu_si512(w + i);
    const __m512i exponent = _mm512_and_si512(_mm512_srli_epi16(bits, 7), exponent_field);
    const __mmask32 dropped = _mm512_cmpeq_epi16_mask(exponent, _mm512_setzero_si512()) |
                              _mm512_cmplt_epi16_mask(_mm512_add_epi16(exponent, shift16), smallest_kept);
    __m512i word = _mm512_mask_mov_epi16(_mm512_add_epi16(bits, step), dropped, _mm512_and_si512(bits, sign));
    word = _mm512_mask_mov_epi16(word, _mm512_cmpeq_epi16_mask(exponent, exponent_field), bits);
    _mm512_storeu_si512(words + i, word);
  }
  for (; i < in; ++i) words[i] = ScaledBf16Word(w[i], shift);
  if (in % 2 != 0) words[in] = 0;
  return shift;
}

// The words of one FP8 weight row as WidenRowToPairs makes them, 32 bytes per step: each byte's
// magnitude looks up its word among the table's first 128 (two 64-word permutes), and the sign is
// or-ed in.
__attribute__((target("avx512f,avx512bw"))) void WidenRowToPairsAvx512(const uint8_t* w, int64_t in, uint32_t* out) {
  const uint16_t* magnitude_words = Fp8PairWords().data();
  const __m512i t0 = _mm512_load_si512(magnitude_words), t1 = _mm512_load_si512(magnitude_words + 32);
  const __m512i t2 = _mm512_load_si512(magnitude_words + 64), t3 = _mm512_load_si512(magnitude_words + 96);
  const __m512i low7 = _mm512_set1_epi16(0x7f), bit6 = _mm512_set1_epi16(0x40), sign = _mm512_set1_epi16(0x80);
  auto* words = reinterpret_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) {
    const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
    const __m512i magnitude = _mm512_and_si512(bytes, low7);
    const __m512i below64 = _mm512_permutex2var_epi16(t0, magnitude, t1);
    const __m512i from64 = _mm512_permutex2var_epi16(t2, magnitude, t3);
    const __m512i word = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(bytes, bit6), below64, from64);
    _mm512_storeu_si512(words + i, _mm512_or_si512(word, _mm512_slli_epi16(_mm512_and_si512(bytes, sign), 8)));
  }
  WidenRowToPairs(w + i, in - i, out + i / 2);  // i is even
}

// Where a chunk's weight rows are widened to: words [kOutChunk, pairs], scales [kOutChunk, blocks]
// (· 2^8) and, for bf16 rows, the outputs' 2^-shift [kOutChunk].
struct ChunkWeights {
  uint32_t* words;
  float* scales;
  float* unshift;
  int64_t pairs, blocks;
};

// Widens weight rows [c0, c0 + n) of w into `chunk`.
void WidenChunk(const TensorView& w, int64_t c0, int64_t n, PairGemmIsa isa, const ChunkWeights& chunk) {
  const int64_t in = w.shape[1];
  for (int64_t o = 0; o < n; ++o) {
    uint32_t* words = chunk.words + o * chunk.pairs;
    float* scales = chunk.scales + o * chunk.blocks;
    if (w.dtype == DType::kBF16) {  // one scale for the row, applied at the end; the blocks add as they are
      const uint16_t* row = w.as<uint16_t>() + (c0 + o) * w.stride[0];
      const int shift = isa == PairGemmIsa::kAvx512Bf16 ? WidenBf16RowToPairsAvx512(row, in, words)
                                                        : WidenBf16RowToPairs(row, in, words);
      chunk.unshift[o] = std::ldexp(1.0f, -shift);
      std::fill_n(scales, chunk.blocks, 1.0f);
      continue;
    }
    const uint8_t* row = w.as<uint8_t>() + (c0 + o) * w.stride[0];
    if (isa == PairGemmIsa::kAvx512Bf16) {
      WidenRowToPairsAvx512(row, in, words);
    } else {
      WidenRowToPairs(row, in, words);
    }
    const float* row_scales = w.block_scale + ((c0 + o) / kFp8Block) * w.scale_stride;
    for (int64_t b = 0; b < chunk.blocks; ++b) scales[b] = row_scales[b] * 256.0f;
    chunk.unshift[o] = 1.0f;
  }
}

PairGemmIsa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return PairGemmIsa::kAvx512Bf16;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PairGemmIsa::kAvx2;
  return PairGemmIsa::kScalar;
}

PairGemmIsa IsaInUse() {
  return forced_isa >= 0 ? static_cast<PairGemmIsa>(forced_isa) : PairGemmBestIsa();
}

}  // namespace

const char* PairGemmIsaName(PairGemmIsa isa) {
  switch (isa) {
    case PairGemmIsa::kAvx512Bf16: return "avx512bf16";
    case PairGemmIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

PairGemmIsa PairGemmBestIsa() {
  static const PairGemmIsa best = DetectIsa();
  return best;
}

PairGemmIsaScope::PairGemmIsaScope(PairGemmIsa isa) : previous_(forced_isa) {
  MTPSPEC_CHECK(static_cast<int>(isa) <= static_cast<int>(PairGemmBestIsa()));
  forced_isa = static_cast<int>(isa);
}

PairGemmIsaScope::~PairGemmIsaScope() { forced_isa = previous_; }

void PreparePairGemmInput(const Fp8PairInput& codes, PairGemmInput* out, ThreadPool* pool) {
  out->rows = codes.rows;
  out->in = codes.in;
  out->pairs = (codes.in + 1) / 2;
  out->tiles = (codes.rows + kPairGemmTileRows - 1) / kPairGemmTileRows;
  out->xt.assign(out->tiles * out->pairs * kPairGemmTileRows, 0u);
  out->unscale = codes.unscale;
  // The word of a line's 64 that holds each element (the codes' order, kernels/fp8_pairs.h).
  static const std::array<uint8_t, kPairLine> word_of = [] {
    std::array<uint8_t, kPairLine> table{};
    for (int64_t j = 0; j < kPairLine; ++j) table[j] = static_cast<uint8_t>(PairWordOfElement(j));
    return table;
  }();
  const int64_t full_pairs = codes.in / 2;  // pairs with both elements in the row
  const auto transpose = [&](int64_t first_tile, int64_t end_tile) {
    for (int64_t r = first_tile * kPairGemmTileRows; r < std::min(codes.rows, end_tile * kPairGemmTileRows); ++r) {
      uint32_t* tile = out->xt.data() + (r / kPairGemmTileRows) * out->pairs * kPairGemmTileRows + r % kPairGemmTileRows;
      const auto* words = reinterpret_cast<const uint16_t*>(codes.Row(r));
      for (int64_t p = 0; p < full_pairs; ++p) {
        const int64_t line = (2 * p) / kPairLine * kPairLine, j = (2 * p) % kPairLine;
        tile[p * kPairGemmTileRows] = words[line + word_of[j]] | static_cast<uint32_t>(words[line + word_of[j + 1]]) << 16;
      }
      if (codes.in % 2 != 0) tile[full_pairs * kPairGemmTileRows] = codes.Code(r, codes.in - 1);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(out->tiles, 1, transpose);
  } else {
    transpose(0, out->tiles);
  }
}

void PairGemm(const PairGemmInput& x, const TensorView& w, int64_t ob, int64_t oe, float* y, int64_t y_stride,
              int64_t y_col0) {
  const bool bf16 = w.dtype == DType::kBF16;
  MTPSPEC_CHECK((bf16 || (w.dtype == DType::kF8E4M3 && w.block_scale != nullptr)) && w.shape[1] == x.in);
  const PairGemmIsa isa = IsaInUse();
  const int64_t blocks = (x.pairs + kBlockPairs - 1) / kBlockPairs;
  thread_local std::vector<uint32_t, Eigen::aligned_allocator<uint32_t>> words;  // [kOutChunk, pairs]
  thread_local std::vector<float> scales;                                         // [kOutChunk, blocks] · 2^8
  thread_local std::vector<float, Eigen::aligned_allocator<float>> totals;       // [kOutChunk, 64]
  thread_local std::vector<float> unshift;                                        // [kOutChunk] bf16: 2^-shift
  words.resize(kOutChunk * x.pairs);
  scales.resize(kOutChunk * blocks);
  totals.resize(kOutChunk * kPairGemmTileRows);
  unshift.resize(kOutChunk);
  const ChunkWeights chunk{words.data(), scales.data(), unshift.data(), x.pairs, blocks};
  for (int64_t c0 = ob; c0 < oe; c0 += kOutChunk) {
    const int64_t n = std::min(kOutChunk, oe - c0);
    WidenChunk(w, c0, n, isa, chunk);
    for (int64_t t = 0; t < x.tiles; ++t) {
      const int rows = static_cast<int>(std::min<int64_t>(kPairGemmTileRows, x.rows - t * kPairGemmTileRows));
      std::fill(totals.begin(), totals.end(), 0.0f);
      // The tile's slab stays in cache while the chunk's groups take it in turn.
      for (int64_t p0 = 0; p0 < x.pairs; p0 += kSlabPairs) {
        for (int64_t g0 = 0; g0 < n; g0 += kOutGroup) {
          const int no = static_cast<int>(std::min<int64_t>(kOutGroup, n - g0));
          MicroTile m{x.Tile(t), p0, std::min(p0 + kSlabPairs, x.pairs), {}, {}, totals.data() + g0 * kPairGemmTileRows};
          for (int o = 0; o < no; ++o) {
            m.w[o] = chunk.words + (g0 + o) * x.pairs;
            m.scale[o] = chunk.scales + (g0 + o) * blocks;
          }
          switch (isa) {
            case PairGemmIsa::kAvx512Bf16: MicroAvx512Any(m, no, rows); break;
            case PairGemmIsa::kAvx2: MicroAvx2(m, no, rows); break;
            default: MicroScalar(m, no, rows);
          }
        }
      }
      for (int r = 0; r < rows; ++r) {
        const int64_t row = t * kPairGemmTileRows + r;
        float* out = y + row * y_stride + (c0 - y_col0);
        for (int64_t o = 0; o < n; ++o) out[o] = totals[o * kPairGemmTileRows + r] * x.unscale[row] * unshift[o];
      }
    }
  }
}

}  // namespace mtpspec
