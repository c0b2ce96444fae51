// Linear with FP8 weights and its input rows in bf16 or fp8 (ActivationPrecision, kernels/fp8_pairs.h):
// the input quantisation against its definition, the weights' widening against every byte's value,
// the result against a float64 reference of dequant(W8) · q, row independence at every row count, and
// the optional line flags against the checked path.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/fp8_pair_tiles.h"
#include "kernels/fp8_pairs.h"
#include "kernels/linear.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec {
namespace {

using namespace linear_test;  // NOLINT: the shared test helpers

constexpr ActivationPrecision kReduced[] = {ActivationPrecision::kBf16, ActivationPrecision::kFp8};

// The quantised row q by the definition (kernels/fp8_pairs.h), from the scalar conversions: per
// group of 128, QuantizeFp8Row's codes times its scale (fp8), or bf16(x) (bf16).
std::vector<float> QuantisedByDefinition(const std::vector<float>& x, int64_t rows, int64_t in,
                                         ActivationPrecision precision) {
  std::vector<float> q(rows * in);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t first = 0; first < in; first += kFp8Block) {
      const int64_t n = std::min(kFp8Block, in - first);
      const float* g = x.data() + r * in + first;
      if (precision == ActivationPrecision::kBf16) {
        for (int64_t i = 0; i < n; ++i) q[r * in + first + i] = Bf16ToF32(F32ToBf16(g[i]));
        continue;
      }
      std::vector<uint8_t> bytes(n);
      const float scale = QuantizeFp8Row(g, n, bytes.data());
      for (int64_t i = 0; i < n; ++i) q[r * in + first + i] = F8E4M3ToF32(bytes[i]) * scale;
    }
  }
  return q;
}

// Row r scaled by 8^(r mod 5 − 2) and with groups of very different sizes, so that the row exponents
// and the group scales vary.
std::vector<float> VariedRows(int64_t rows, int64_t in, uint32_t seed) {
  std::vector<float> x = RandomFloats(rows * in, seed);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      x[r * in + i] *= std::ldexp(1.0f, 3 * static_cast<int>(r % 5) - 6) * ((i / kFp8Block) % 3 == 1 ? 1e-3f : 1.0f);
    }
  }
  return x;
}

// PrepareFp8PairInput's values (code · 2^-e) are the definition's q bit for bit; the padding past
// `in` is zero; 2^-e follows the row's largest magnitude.
TEST(Fp8PairsTest, InputValuesAreTheQuantisedRowsByDefinition) {
  for (ActivationPrecision precision : kReduced) {
    for (int64_t in : kInSizes) {
      const int64_t rows = 5;
      const std::vector<float> x = VariedRows(rows, in, static_cast<uint32_t>(in));
      Fp8PairInput input;
      PrepareFp8PairInput(x.data(), rows, in, precision, &input);
      ASSERT_EQ(input.lines, (in + 63) / 64);
      std::vector<float> values(rows * in);
      DequantiseFp8PairInput(input, values.data());
      const std::vector<float> q = QuantisedByDefinition(x, rows, in, precision);
      for (int64_t i = 0; i < rows * in; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>(q[i]))
            << ActivationPrecisionName(precision) << " in " << in << " at " << i << ": x " << x[i];
      }
      for (int64_t r = 0; r < rows; ++r) {
        float max_abs = 0;
        for (int64_t i = 0; i < in; ++i) max_abs = std::max(max_abs, std::fabs(x[r * in + i]));
        EXPECT_EQ(input.unscale[r], std::ldexp(1.0f, std::ilogb(max_abs) - 99)) << "row " << r;
        for (int64_t i = in; i < input.lines * 64; ++i) ASSERT_EQ(input.Code(r, i), 0) << "padding " << i;
      }
    }
  }
}

// Edge values: e4m3's subnormal range and the rounding ties in every binade, a row of zeros (2^-e
// = 1), a group holding ∞ or NaN (NaN values there, the other groups as defined), rows of huge and
// tiny magnitude, and values under 2^-199 of the row's largest, which become 0.
TEST(Fp8PairsTest, EdgeValues) {
  constexpr int64_t kIn = 300;
  for (ActivationPrecision precision : kReduced) {
    std::vector<float> x(6 * kIn, 0.0f);  // row 1 stays zero
    for (int64_t i = 0; i < kIn; ++i) {
      x[i] = std::ldexp(static_cast<float>(i % 17) - 8.0f, -static_cast<int>(i % 30));
      x[2 * kIn + i] = i == 150 ? std::numeric_limits<float>::infinity() : 1.0f + static_cast<float>(i);
      x[3 * kIn + i] = (i % 2 ? -3e37f : 2e37f) / static_cast<float>(1 + i);
      x[4 * kIn + i] = 1e-38f * static_cast<float>(i % 7);
      x[5 * kIn + i] = i == 0 ? 1.0f : 0x1p-120f;
    }
    x[2 * kIn + 20] = std::numeric_limits<float>::quiet_NaN();
    Fp8PairInput input;
    PrepareFp8PairInput(x.data(), 6, kIn, precision, &input);
    std::vector<float> values(6 * kIn);
    DequantiseFp8PairInput(input, values.data());
    const std::vector<float> q = QuantisedByDefinition(x, 6, kIn, precision);
    EXPECT_EQ(input.unscale[1], 1.0f);  // the row of zeros
    for (int64_t i = 0; i < 6 * kIn; ++i) {
      const bool nan_group = i / kIn == 2 && i % kIn < 2 * kFp8Block;  // row 2's groups 0 (NaN) and 1 (∞)
      if (nan_group) {
        ASSERT_TRUE(std::isnan(values[i])) << ActivationPrecisionName(precision) << " at " << i;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>(q[i]))
            << ActivationPrecisionName(precision) << " row " << i / kIn << " at " << i % kIn << ": x " << x[i];
      }
    }
  }
  // A row whose largest value is 2^100 has e = -1: 2^-90 keeps its code 2^-91, 2^-110 (under 2^-199
  // of 2^100 after the scaling: its code 2^-111 is below 2^-100) becomes 0.
  std::vector<float> y(128, 0.0f);
  y[0] = 0x1p100f;
  y[1] = 0x1p-90f;
  y[2] = -0x1p-110f;
  Fp8PairInput input;
  PrepareFp8PairInput(y.data(), 1, 128, ActivationPrecision::kBf16, &input);
  EXPECT_EQ(input.unscale[0], 2.0f);
  EXPECT_EQ(Bf16ToF32(input.Code(0, 1)) * input.unscale[0], 0x1p-90f);
  EXPECT_EQ(input.Code(0, 2), 0x8000);  // -0
}

#if defined(MTPSPEC_FP8_PAIRS_SIMD)
// Every byte at every position of a line widens to the bf16 word of its value times 2^-8 (the NaN
// codes to NaN): the kernels' widening (PairLine, with its fix-up, and the shift route of CPUs
// without GFNI) against Fp8PairWord, and that against the scalar value.
TEST(Fp8PairsTest, EveryByteWidensToItsValueAtEveryPosition) {
  for (int b = 0; b < 256; ++b) {
    const uint16_t word = Fp8PairWord(static_cast<uint8_t>(b));
    const float value = F8E4M3ToF32(static_cast<uint8_t>(b));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(word))) << "byte " << b;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(Bf16ToF32(word)), std::bit_cast<uint32_t>(value * 0x1p-8f)) << "byte " << b;
    }
  }
  for (int shift = 0; shift < 256; ++shift) {
    alignas(64) uint8_t line[64];
    for (int i = 0; i < 64; ++i) line[i] = static_cast<uint8_t>((i * 5 + shift) % 256);
    const __m512i bytes = _mm512_load_si512(line);
    alignas(64) uint16_t got[64], by_shifts[64];
    const tiles::Fp8PairLine checked = tiles::PairLine<false>(bytes);
    _mm512_store_si512(got, checked.low);
    _mm512_store_si512(got + 32, checked.high);
    tiles::Fp8PairBytes shifted = tiles::PairBytesByShifts(bytes);
    tiles::FixPairBytes(bytes, tiles::PairBytesToFix<false>(bytes), &shifted);
    const tiles::Fp8PairLine by_shift_line = tiles::PairLineOf(shifted);
    _mm512_store_si512(by_shifts, by_shift_line.low);
    _mm512_store_si512(by_shifts + 32, by_shift_line.high);
    for (int j = 0; j < 64; ++j) {
      const int64_t word = PairWordOfElement(j);
      ASSERT_EQ(got[word], Fp8PairWord(line[j])) << "byte 0x" << std::hex << int{line[j]} << std::dec << " at " << j;
      ASSERT_EQ(by_shifts[word], Fp8PairWord(line[j])) << "shifts, byte 0x" << std::hex << int{line[j]};
    }
  }
}

// The pair products' f32 multiply-adds (builds without AVX-512 BF16) give the instruction's bits.
#if defined(__AVX512BF16__)
TEST(Fp8PairsTest, PairProductsByMultiplyAddsEqualTheInstruction) {
  const std::vector<float> a = RandomFloats(32 * 64, 1), b = RandomFloats(32 * 64, 2), c = RandomFloats(16 * 64, 3);
  for (int t = 0; t < 64; ++t) {
    alignas(64) uint16_t wa[32], wb[32];
    for (int i = 0; i < 32; ++i) {
      wa[i] = F32ToBf16(a[t * 32 + i] * (i % 3 == 0 ? 1e3f : 1.0f));
      wb[i] = F32ToBf16(b[t * 32 + i]);
    }
    const __m512 acc = _mm512_loadu_ps(c.data() + t * 16);
    alignas(64) float one[16], two[16];
    _mm512_store_ps(one, tiles::PairProducts(acc, _mm512_load_si512(wa), _mm512_load_si512(wb)));
    _mm512_store_ps(two, tiles::PairProductsFma(acc, _mm512_load_si512(wa), _mm512_load_si512(wb)));
    for (int l = 0; l < 16; ++l) ASSERT_EQ(std::bit_cast<uint32_t>(one[l]), std::bit_cast<uint32_t>(two[l])) << t << " " << l;
  }
}
#endif
#endif

// A copy of w marked for `precision`, with its line flags attached when `flags` holds them.
TensorView WithActivations(TensorView w, ActivationPrecision precision, const Tensor* flags) {
  w.activations = precision;
  if (flags != nullptr) {
    w.fp8_line_flags = reinterpret_cast<const uint64_t*>(flags->data<int64_t>());
    w.line_flag_stride = flags->dim(1);
  }
  return w;
}

// y = q · dequant(W8)ᵀ within the f32 summation bound: every product is exact, each sum rounds once
// (the pair products, the block scale's multiply-add, the lane reduction), and the final 2^-e is
// exact. Shapes leave partial blocks and lines in both directions; 1-40 rows cover the tiles and the
// GEMM path (which multiplies q too).
TEST(Fp8PairsTest, MatchesFloat64ReferenceOfTheQuantisedRows) {
  ThreadPool pool(3);
  const std::pair<int64_t, int64_t> kShapes[] = {{37, 100}, {129, 130}, {259, 300}, {300, 1024}, {5, 1}, {16, 64}};
  for (const auto& [out, in] : kShapes) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in + 3, static_cast<uint32_t>(out * 7 + in));
    const Tensor flags = Fp8PairLinesToFix(w.view);
    const std::vector<float> x = VariedRows(40, in, 77);
    for (ActivationPrecision precision : kReduced) {
      const std::vector<float> q = QuantisedByDefinition(x, 40, in, precision);
      for (const Tensor* f : {static_cast<const Tensor*>(nullptr), &flags}) {
        const TensorView view = WithActivations(w.view, precision, f);
        for (int64_t rows : {1, 2, 3, 4, 5, 8, 15, 16, 23, 24, 40}) {
          std::vector<float> y(rows * out);
          Linear(x.data(), rows, view, y.data(), &pool);
          const std::vector<float> q_rows(q.begin(), q.begin() + rows * in);
          ExpectNearReference(q_rows, w.values, rows, in, out, y.data(), ActivationPrecisionName(precision));
        }
      }
    }
  }
}

// Each row's result is the one it gets alone, bit for bit, at every small row count and with a
// RowInvariantScope beyond; the line flags, the NaN-free mark and the checked route agree bit for bit.
TEST(Fp8PairsTest, RowsAreIndependentAndEveryRouteGivesTheSameBits) {
  ThreadPool pool(2);
  const std::pair<int64_t, int64_t> kShapes[] = {{37, 100}, {45, 1024}, {13, 7}, {8, 6144}, {70, 200}};
  for (const auto& [out, in] : kShapes) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in, static_cast<uint32_t>(out + in));
    ASSERT_TRUE(w.view.fp8_nan_free);
    const Tensor flags = Fp8PairLinesToFix(w.view);
    const std::vector<float> x = VariedRows(40, in, 5);
    for (ActivationPrecision precision : kReduced) {
      const TensorView flagged = WithActivations(w.view, precision, &flags);
      std::vector<float> alone(40 * out);
      for (int64_t r = 0; r < 40; ++r) Linear(x.data() + r * in, 1, flagged, alone.data() + r * out, &pool);
      TensorView checked = WithActivations(w.view, precision, nullptr);
      TensorView unmarked = checked;
      unmarked.fp8_nan_free = false;
      for (const TensorView& view : {flagged, checked, unmarked}) {
        for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 23, 40}) {
          RowInvariantScope scope;  // 40 rows stay on the tiles
          std::vector<float> y(rows * out);
          Linear(x.data(), rows, view, y.data(), &pool);
          for (int64_t i = 0; i < rows * out; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(alone[i]))
                << ActivationPrecisionName(precision) << " out " << out << " in " << in << " rows " << rows << " at " << i;
          }
        }
      }
    }
  }
}

// Every FP8 byte through the pair tiles: row o of a [256, 300] matrix holds byte o at column c_o and
// ones elsewhere, so the NaN codes give NaN, and every other output matches the float64 reference;
// with and without line flags, marked free of NaN codes where the NaN rows are cleared.
TEST(Fp8PairsTest, EveryByteThroughTheKernel) {
  constexpr int64_t kOut = 256, kIn = 300;
  std::vector<float> scales = {1.0f, 0.37f, 3.0f, 0.5f, 2.0f, 0.125f};  // [2, 3]
  const int64_t scale_cols = 3;
  const std::vector<float> x = VariedRows(3, kIn, 9);
  ThreadPool pool(2);
  for (bool nan_free : {false, true}) {
    std::vector<uint8_t> bytes(kOut * kIn, 0x38);  // 1.0
    for (int64_t o = 0; o < kOut; ++o) {
      const bool nan = (o & 0x7F) == 0x7F;
      bytes[o * kIn + (o * 37) % kIn] = nan && nan_free ? uint8_t{0x00} : static_cast<uint8_t>(o);
    }
    TensorView view = Fp8View(bytes.data(), kOut, kIn, kIn, scales.data());
    view.fp8_nan_free = !Fp8HasNanCode(view);
    ASSERT_EQ(view.fp8_nan_free, nan_free);
    std::vector<float> values(kOut * kIn);
    for (int64_t i = 0; i < kOut * kIn; ++i) {
      values[i] = F8E4M3ToF32(bytes[i]) * scales[(i / kIn / kFp8Block) * scale_cols + (i % kIn) / kFp8Block];
    }
    const Tensor flags = Fp8PairLinesToFix(view);
    for (ActivationPrecision precision : kReduced) {
      const std::vector<float> q = QuantisedByDefinition(x, 3, kIn, precision);
      for (const Tensor* f : {static_cast<const Tensor*>(nullptr), &flags}) {
        std::vector<float> y(3 * kOut);
        Linear(x.data(), 3, WithActivations(view, precision, f), y.data(), &pool);
        ExpectNearReference(q, values, 3, kIn, kOut, y.data(), ActivationPrecisionName(precision));
      }
    }
  }
}

// The flags mark exactly the full lines that hold a zero, a subnormal or a NaN code.
TEST(Fp8PairsTest, LinesToFixMarkExactlyTheLinesThatNeedIt) {
  constexpr int64_t kRows = 3, kCols = 64 * 70 + 20, kStride = kCols + 12;
  std::vector<uint8_t> bytes(kRows * kStride, 0x38);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < 70; j += 1 + r) bytes[r * kStride + 64 * j + (j * 7) % 64] = static_cast<uint8_t>(j % 3 == 0 ? 0x00 : j % 3 == 1 ? 0x85 : 0xFF);
  }
  bytes[kCols + 3] = 0x00;  // in row 0's padding: not read
  const TensorView view = Fp8View(bytes.data(), kRows, kCols, kStride, nullptr);
  const Tensor flags = Fp8PairLinesToFix(view);
  ASSERT_EQ(flags.dim(0), kRows);
  ASSERT_EQ(flags.dim(1), 2);
  const auto* bits = reinterpret_cast<const uint64_t*>(flags.data<int64_t>());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < 128; ++j) {
      const bool expected = j < 70 && j % (1 + r) == 0;
      EXPECT_EQ((bits[r * 2 + j / 64] >> (j % 64)) & 1, expected ? 1u : 0u) << "row " << r << " line " << j;
    }
  }
}

TEST(Fp8PairsTest, ParsesActivationPrecisions) {
  EXPECT_EQ(*ParseActivationPrecision("f32", "--activations"), ActivationPrecision::kF32);
  EXPECT_EQ(*ParseActivationPrecision("bf16", "--activations"), ActivationPrecision::kBf16);
  EXPECT_EQ(*ParseActivationPrecision("fp8", "--activations"), ActivationPrecision::kFp8);
  const absl::StatusOr<ActivationPrecision> bad = ParseActivationPrecision("int8", "--activations");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--activations"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("int8"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace mtpspec
