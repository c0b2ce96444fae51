// Linear with FP8 weights (kernels/linear.h): against a float64 reference of dequant(W8) · x, every
// byte through each path (the one-row tiles' line widening on its own too), and the two tile routes
// (the NaN-checked fp16 route and the direct one that rows free of NaN encodings take) against each
// other.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/linear.h"
#include "kernels/row_kernels.h"
#include "kernels/simd_tiles.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec {
namespace {

using namespace linear_test;  // NOLINT: the shared test helpers

// FP8 against a float64 reference of dequant(W8) · x: the exact products of the FP8 values and their
// block scales, summed in double. Dimensions that are not multiples of 128 leave partial edge blocks
// in both directions, and every row count from decode to prefill (1-40) is checked.
TEST(LinearFp8Test, MatchesFloat64DequantReferenceWithPartialEdgeBlocks) {
  ThreadPool pool(3);
  const std::pair<int64_t, int64_t> kShapes[] = {{37, 100}, {129, 130}, {259, 300}, {300, 1024}, {5, 1}};
  for (const auto& [out, in] : kShapes) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in + 3, static_cast<uint32_t>(out * 7 + in));
    const int64_t scale_cols = (in + kFp8Block - 1) / kFp8Block;
    const std::vector<float> x = RandomFloats(40 * in, 77);
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 15, 16, 23, 24, 40}) {
      std::vector<float> y(rows * out);
      Linear(x.data(), rows, w.view, y.data(), &pool);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double exact = 0, magnitude = 0;
          for (int64_t i = 0; i < in; ++i) {
            const double dequant = static_cast<double>(F8E4M3ToF32(w.fp8[o * (in + 3) + i])) *
                                   w.scales[(o / kFp8Block) * scale_cols + i / kFp8Block];
            exact += x[r * in + i] * dequant;
            magnitude += std::fabs(x[r * in + i] * dequant);
          }
          // The f32 product of a block's sum and its scale (the tiles), or of each weight and its
          // scale (the GEMM), adds one rounding to each term.
          ASSERT_NEAR(y[r * out + o], exact, (in + 17) * 0x1p-24 * magnitude + 1e-30)
              << "out " << out << " in " << in << " rows " << rows << " at (" << r << ", " << o << ")";
        }
      }
    }
  }
}

// WidenFp8Row (the prefill GEMM's and the loader's widening) gives F8E4M3ToF32(byte) · scale bit for
// bit: every byte, scales from the smallest positive float to the largest allowed one, and lengths
// that end inside a 16-lane vector and inside a 128-column block.
TEST(LinearFp8Test, WidenFp8RowIsTheScaledValueOfEveryByte) {
  const float kScales[] = {std::numeric_limits<float>::denorm_min(), 1e-30f, 0.37f, 1.0f, 3.0f, kMaxFp8BlockScale};
  for (int64_t n : {1, 15, 16, 17, 127, 128, 129, 256, 300}) {
    for (float first : kScales) {
      std::vector<uint8_t> bytes(n);
      for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>((i * 97 + n) % 256);
      const std::vector<float> scales = {first, 0.125f, first * 0.5f};  // [⌈300/128⌉]
      std::vector<float> out(n + 1, -7.0f);  // one guard element past the row
      WidenFp8Row(bytes.data(), scales.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const float expected = F8E4M3ToF32(bytes[i]) * scales[i / kFp8Block];
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(out[i])) << "n " << n << " at " << i;
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected))
              << "n " << n << " scale " << first << " byte 0x" << std::hex << int{bytes[i]};
        }
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the row, n " << n;
    }
  }
  // All 256 bytes in one row, against every scale.
  std::vector<uint8_t> all(256);
  for (int b = 0; b < 256; ++b) all[b] = static_cast<uint8_t>(b);
  for (float scale : kScales) {
    const std::vector<float> scales = {scale, scale};
    std::vector<float> out(256);
    WidenFp8Row(all.data(), scales.data(), 256, out.data());
    for (int b = 0; b < 256; ++b) {
      const float expected = F8E4M3ToF32(static_cast<uint8_t>(b)) * scale;
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(out[b])) << "byte " << b;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(out[b]), std::bit_cast<uint32_t>(expected)) << "byte " << b << " scale " << scale;
      }
    }
  }
}

#if defined(MTPSPEC_FP8_SIMD)
// The one-row tiles' line widening (Fp8Line: with GFNI a dword transpose, two bit-matrix products and
// unpacks) gives, for every byte at every position of a 64-byte line, the bits of the per-16
// widening (Fp8Direct) in the same lane, and those are the byte's value times 2^-120 exactly (the
// NaN encodings aside, which only rows free of them reach).
TEST(LinearFp8Test, LineWideningIsTheDirectWideningOfEveryByteAtEveryPosition) {
  for (int shift = 0; shift < 256; ++shift) {
    alignas(64) uint8_t line[64];
    for (int i = 0; i < 64; ++i) line[i] = static_cast<uint8_t>((i * 5 + shift) % 256);  // each byte, each position
    const tiles::Fp8Line widened(line);
    for (int j = 0; j < 4; ++j) {
      alignas(64) float got[16], direct[16];
      _mm512_store_ps(got, widened.Vector(j));
      _mm512_store_ps(direct, tiles::Fp8Direct(line + 16 * j));
      for (int l = 0; l < 16; ++l) {
        const uint8_t byte = line[16 * j + l];
        ASSERT_EQ(std::bit_cast<uint32_t>(got[l]), std::bit_cast<uint32_t>(direct[l]))
            << "byte 0x" << std::hex << int{byte} << std::dec << " at position " << 16 * j + l;
        if ((byte & 0x7F) != 0x7F) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[l]), std::bit_cast<uint32_t>(F8E4M3ToF32(byte) * 0x1p-120f))
              << "byte 0x" << std::hex << int{byte};
        }
      }
    }
  }
}
#endif

// Every FP8 byte through the kernel: row o of a [256, 300] matrix holds byte o at column c_o and
// zeros elsewhere (columns in different scale blocks), so output o is x[c_o] · value(o) · scale,
// rounded in the order of the path that ran (the tiles scale a block's sum, the GEMM a weight):
// subnormals, ±0 and the largest values exactly, and the NaN encodings 0x7f and 0xff as NaN.
TEST(LinearFp8Test, EveryByteWidensExactly) {
  constexpr int64_t kOut = 256, kIn = 300;
  const int64_t scale_cols = (kIn + kFp8Block - 1) / kFp8Block;
  std::vector<float> scales = {1.0f, 0.37f, 3.0f, 0.5f, 2.0f, 0.125f};  // [2, 3]
  std::vector<float> x = RandomFloats(kIn, 3);
  for (float& v : x) v = v == 0.0f ? 1.0f : v;
  ThreadPool pool(2);
  // As stored (NaN encodings included, so the kernels check), and with the two NaN rows zeroed and
  // the matrix marked free of them (the direct widening).
  for (bool nan_free : {false, true}) {
    std::vector<uint8_t> bytes(kOut * kIn, 0);
    for (int64_t o = 0; o < kOut; ++o) {
      if (!(nan_free && (o & 0x7F) == 0x7F)) bytes[o * kIn + (o * 37) % kIn] = static_cast<uint8_t>(o);
    }
    TensorView view = Fp8View(bytes.data(), kOut, kIn, kIn, scales.data());
    ASSERT_EQ(Fp8HasNanCode(view), !nan_free);
    view.fp8_nan_free = nan_free;
    for (int64_t rows : {1, 3, 24, 40}) {  // the small-row tiles and the widening GEMM path
      std::vector<float> xs(rows * kIn);
      for (int64_t r = 0; r < rows; ++r) std::copy(x.begin(), x.end(), xs.begin() + r * kIn);
      std::vector<float> ys(rows * kOut);
      Linear(xs.data(), rows, view, ys.data(), &pool);
      for (int64_t o = 0; o < kOut; ++o) {
        const int64_t c = (o * 37) % kIn;
        const float value = nan_free && (o & 0x7F) == 0x7F ? 0.0f : F8E4M3ToF32(static_cast<uint8_t>(o));
        const float scale = scales[(o / kFp8Block) * scale_cols + c / kFp8Block];
        for (int64_t r = 0; r < rows; ++r) {
          const float got = ys[r * kOut + o];
          if (std::isnan(value)) {
            EXPECT_TRUE(std::isnan(got)) << "byte 0x" << std::hex << o;
          } else if (rows < kLinearGemmRows) {  // the tiles scale the block's sum
            EXPECT_EQ(got, (value * x[c]) * scale)
                << "byte 0x" << std::hex << o << ", " << std::dec << rows << " rows, nan_free " << nan_free;
          } else {  // the GEMM multiplies x by the widened weight
            EXPECT_EQ(got, (value * scale) * x[c]) << "byte 0x" << std::hex << o << ", " << std::dec << rows << " rows";
          }
        }
      }
    }
  }
}

// Fp8HasNanCode finds 0x7f and 0xff wherever they sit in a row (inside a 64-byte line or in the
// tail), and reads no byte between rows.
TEST(LinearFp8Test, HasNanCodeFindsEveryPositionAndSkipsTheRowPadding) {
  constexpr int64_t kRows = 3, kCols = 150, kStride = 160;
  std::vector<uint8_t> bytes(kRows * kStride, 0x3A);
  TensorView view = Fp8View(bytes.data(), kRows, kCols, kStride, nullptr);
  EXPECT_FALSE(Fp8HasNanCode(view));
  for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kStride; ++c) {
        bytes[r * kStride + c] = nan;
        EXPECT_EQ(Fp8HasNanCode(view), c < kCols) << "row " << r << " column " << c;
        bytes[r * kStride + c] = 0x3A;
      }
    }
  }
  for (int b = 0; b < 256; ++b) {  // every other byte, ±0, subnormals and ±448 included, is no NaN
    if ((b & 0x7F) == 0x7F) continue;
    std::fill(bytes.begin(), bytes.end(), static_cast<uint8_t>(b));
    EXPECT_FALSE(Fp8HasNanCode(view)) << "byte " << b;
  }
}

// A matrix marked free of NaN encodings takes the direct widening over x scaled by 2^112; the same
// bytes unmarked take the NaN-checked fp16 route. For inputs below 2^15 the two form the same
// products in the same order, so they agree bit for bit, at every small row count and width.
TEST(LinearFp8Test, NanFreeRowsGiveTheCheckedRoutesBits) {
  ThreadPool pool(2);
  const std::pair<int64_t, int64_t> kShapes[] = {{37, 100}, {129, 130}, {45, 1024}, {13, 7}, {8, 6144}};
  for (const auto& [out, in] : kShapes) {
    TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in + 3, static_cast<uint32_t>(out + in));
    ASSERT_TRUE(w.view.fp8_nan_free);
    TensorView checked = w.view;
    checked.fp8_nan_free = false;
    for (float magnitude : {1.0f, 1e-30f, 3e4f}) {
      std::vector<float> x = RandomFloats(23 * in, 5);
      for (float& v : x) v *= magnitude;
      for (int64_t rows = 1; rows < kLinearGemmRows; ++rows) {
        std::vector<float> direct(rows * out), reference(rows * out);
        Linear(x.data(), rows, w.view, direct.data(), &pool);
        Linear(x.data(), rows, checked, reference.data(), &pool);
        for (int64_t i = 0; i < rows * out; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(direct[i]), std::bit_cast<uint32_t>(reference[i]))
              << "out " << out << " in " << in << " rows " << rows << " magnitude " << magnitude << " at " << i;
        }
      }
    }
  }
}

// Rows holding values of 2^15 and more are scaled down instead of by 2^112 (x · 2^112 would
// overflow) and their outputs scaled back: they still meet the float64 reference, and each row's
// result is the one it gets alone, beside rows scaled the ordinary way.
TEST(LinearFp8Test, LargeInputRowsMeetTheReferenceAndStayRowInvariant) {
  ThreadPool pool(2);
  constexpr int64_t kOut = 70, kIn = 300;
  const TestWeight w = MakeWeight(DType::kF8E4M3, kOut, kIn, kIn, 17);
  ASSERT_TRUE(w.view.fp8_nan_free);
  const float kPeaks[] = {1.0f, 0x1p15f, 0x1.8p16f, 3.3e5f, 1e20f, 1e36f, 0x1p15f * 0.999f, 5e30f};
  constexpr int64_t kRows = std::size(kPeaks);
  std::vector<float> x = RandomFloats(kRows * kIn, 23);
  for (int64_t r = 0; r < kRows; ++r) {
    x[r * kIn + (r * 41) % kIn] = kPeaks[r];
    for (int64_t i = 0; i < kIn; ++i) x[r * kIn + i] *= std::min(kPeaks[r], 1e30f) / 4;
    x[r * kIn + (r * 41) % kIn] = kPeaks[r];
  }
  std::vector<float> y(kRows * kOut);
  Linear(x.data(), kRows, w.view, y.data(), &pool);
  const int64_t scale_cols = (kIn + kFp8Block - 1) / kFp8Block;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < kIn; ++i) {
        const double term = static_cast<double>(x[r * kIn + i]) * F8E4M3ToF32(w.fp8[o * kIn + i]) *
                            w.scales[(o / kFp8Block) * scale_cols + i / kFp8Block];
        exact += term;
        magnitude += std::fabs(term);
      }
      ASSERT_TRUE(std::isfinite(y[r * kOut + o])) << "row " << r << " out " << o;
      ASSERT_NEAR(y[r * kOut + o], exact, (kIn + 17) * 0x1p-24 * magnitude) << "peak " << kPeaks[r] << " out " << o;
    }
    std::vector<float> alone(kOut);
    Linear(x.data() + r * kIn, 1, w.view, alone.data(), &pool);
    for (int64_t o = 0; o < kOut; ++o) ASSERT_EQ(alone[o], y[r * kOut + o]) << "peak " << kPeaks[r] << " out " << o;
  }
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what, int64_t n, int64_t first) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " n " << n << " first " << first << " at " << i;
  }
}

// The row kernels read an FP8 row with its block scales (Fp8ScaledRow, the absorbed attention's
// kv_b_proj) as the loader's widening would store it: DotRows and CombineRows over FP8 rows equal,
// bit for bit, the same calls over the rows widened to f32 by WidenFp8Row. The rows start at offsets
// that are not multiples of 128 (a head's slice of kv_b_proj) and widths leave partial blocks; a NaN
// byte gives NaN.
TEST(LinearFp8Test, RowKernelsReadFp8RowsAsTheirWidenedValues) {
  constexpr int64_t kMatrixRows = 400;
  for (int64_t n : {16, 100, 300, 512}) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, kMatrixRows, n, n, static_cast<uint32_t>(n));
    const int64_t scale_cols = (n + kFp8Block - 1) / kFp8Block;
    std::vector<float> widened(kMatrixRows * n);  // [400, n]
    for (int64_t o = 0; o < kMatrixRows; ++o) {
      WidenFp8Row(w.fp8.data() + o * n, w.scales.data() + (o / kFp8Block) * scale_cols, n, widened.data() + o * n);
    }
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 5}, {93, 70}, {192, 130}, {250, 150}}) {
      std::vector<Fp8ScaledRow> fp8_rows(count);
      std::vector<const float*> f32_rows(count);
      for (int64_t i = 0; i < count; ++i) {
        fp8_rows[i] = {w.fp8.data() + (first + i) * n, w.scales.data() + ((first + i) / kFp8Block) * scale_cols};
        f32_rows[i] = widened.data() + (first + i) * n;
      }
      for (int64_t rows : {1, 3, 6}) {
        const std::vector<float> x = RandomFloats(rows * n, 11);
        std::vector<float> a(rows * count), b(rows * count);
        DotRows(x.data(), rows, n, fp8_rows.data(), count, n, a.data(), count);
        DotRows(x.data(), rows, n, f32_rows.data(), count, n, b.data(), count);
        ExpectSameBits(a, b, "DotRows", n, first);
        const std::vector<float> coeff = RandomFloats(rows * count, 12);
        std::vector<float> c(rows * n), d(rows * n);
        CombineRows(coeff.data(), rows, count, fp8_rows.data(), count, n, c.data(), n);
        CombineRows(coeff.data(), rows, count, f32_rows.data(), count, n, d.data(), n);
        ExpectSameBits(c, d, "CombineRows", n, first);
      }
    }
  }
  // A NaN encoding in a row makes the outputs that read it NaN.
  std::vector<uint8_t> bytes(2 * 40, 0x38);  // 1.0
  bytes[40 + 7] = 0x7F;
  const float scale = 0.5f;
  const Fp8ScaledRow rows[] = {{bytes.data(), &scale}, {bytes.data() + 40, &scale}};
  const std::vector<float> x(40, 1.0f);
  float y[2];
  DotRows(x.data(), 1, 40, rows, 2, 40, y, 2);
  EXPECT_EQ(y[0], 20.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  std::vector<float> z(40);
  const float coeff[] = {1.0f, 1.0f};
  CombineRows(coeff, 1, 2, rows, 2, 40, z.data(), 40);
  EXPECT_EQ(z[0], 1.0f);
  EXPECT_TRUE(std::isnan(z[7]));
}

}  // namespace
}  // namespace mtpspec
