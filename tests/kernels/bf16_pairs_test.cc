// The bf16 pair products (kernels/bf16_pairs.h): the SIMD kernel against the scalar chain bit for bit,
// the chain against a float64 sum of the same bf16 values, and the pair layout.
#include "kernels/bf16_pairs.h"

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

std::vector<uint32_t> RandomPairs(int64_t count, std::mt19937& rng, float spread) {
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<uint32_t> pairs(count);
  for (uint32_t& p : pairs) p = PackBf16Pair(unit(rng) * std::exp(spread * unit(rng)), unit(rng) * std::exp(spread * unit(rng)));
  return pairs;
}

TEST(Bf16PairsTest, APairHoldsTheEvenElementLowAndTheOddHighRoundedToNearestEven) {
  const uint32_t pair = PackBf16Pair(1.0f, -2.0f);
  EXPECT_EQ(pair & 0xffffu, 0x3f80u);
  EXPECT_EQ(pair >> 16, 0xc000u);
  // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one (1); 1 + 3·2^-8 to 1 + 2^-6.
  EXPECT_EQ(Bf16PairLow(PackBf16Pair(1.0f + 0x1p-8f, 0.0f)), 1.0f);
  EXPECT_EQ(Bf16PairLow(PackBf16Pair(1.0f + 0x3p-8f, 0.0f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(Bf16PairHigh(PackBf16Pair(0.0f, 3.5f)), 3.5f);
}

TEST(Bf16PairsTest, AStepAddsTheOddProductThenTheEvenOne) {
  // acc = 1, odd product 2^-24, even product 2^-24: each sum rounds back to 1 (ties to even). Any
  // other grouping ((odd + even) first, or one fused sum) would give 1 + 2^-23.
  const uint32_t x = PackBf16Pair(0x1p-12f, 0x1p-12f), w = PackBf16Pair(0x1p-12f, 0x1p-12f);
  EXPECT_EQ(Bf16PairStep(1.0f, x, w), 1.0f);
  // acc = 2^24: the odd product 1 is lost in 2^24 + 1, then the even product −2^24 leaves 0. The
  // even product first would have left 1.
  EXPECT_EQ(Bf16PairStep(0x1p24f, PackBf16Pair(-0x1p12f, 1.0f), PackBf16Pair(0x1p12f, 1.0f)), 0.0f);
  EXPECT_EQ(Bf16PairStep(0.0f, PackBf16Pair(3.0f, 5.0f), PackBf16Pair(7.0f, 11.0f)), 76.0f);
}

// Every output of CombineBf16Pairs is the scalar chain, bit for bit, for row counts on both sides of
// the 4-row groups, widths on both sides of 16 and 64 (masked vectors), and pair counts up to 80.
TEST(Bf16PairsTest, CombineIsTheScalarChainForEveryShape) {
  std::mt19937 rng(11);
  for (int64_t rows : {1, 3, 4, 5, 9}) {
    for (int64_t width : {1, 15, 16, 17, 63, 64, 65, 130}) {
      for (int64_t pairs : {1, 2, 7, 64, 80}) {
        const int64_t x_stride = pairs + 3, w_stride = width + 5, y_stride = width + 2;
        const std::vector<uint32_t> x = RandomPairs(rows * x_stride, rng, 1.0f);   // [rows, x_stride]
        const std::vector<uint32_t> w = RandomPairs(pairs * w_stride, rng, 1.0f);  // [pairs, w_stride]
        std::vector<float> y(rows * y_stride, -7.0f);                                // [rows, y_stride]
        CombineBf16Pairs(x.data(), rows, x_stride, w.data(), pairs, w_stride, width, y.data(), y_stride);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < width; ++c) {
            float chain = 0.0f;
            for (int64_t p = 0; p < pairs; ++p) chain = Bf16PairStep(chain, x[r * x_stride + p], w[p * w_stride + c]);
            ASSERT_EQ(std::bit_cast<uint32_t>(y[r * y_stride + c]), std::bit_cast<uint32_t>(chain))
                << "rows " << rows << " width " << width << " pairs " << pairs << " at (" << r << ", " << c << ")";
          }
          for (int64_t c = width; c < y_stride; ++c) ASSERT_EQ(y[r * y_stride + c], -7.0f) << "wrote past the width";
        }
      }
    }
  }
}

// A row's outputs do not depend on the other rows of the call (the speculative-decoding invariant).
TEST(Bf16PairsTest, ARowAloneEqualsTheSameRowInABatch) {
  std::mt19937 rng(12);
  const int64_t rows = 7, pairs = 64, width = 64;
  const std::vector<uint32_t> x = RandomPairs(rows * pairs, rng, 0.5f), w = RandomPairs(pairs * width, rng, 0.5f);
  std::vector<float> all(rows * width), one(width);
  CombineBf16Pairs(x.data(), rows, pairs, w.data(), pairs, width, width, all.data(), width);
  for (int64_t r = 0; r < rows; ++r) {
    CombineBf16Pairs(x.data() + r * pairs, 1, pairs, w.data(), pairs, width, width, one.data(), width);
    for (int64_t c = 0; c < width; ++c) ASSERT_EQ(std::bit_cast<uint32_t>(one[c]), std::bit_cast<uint32_t>(all[r * width + c])) << r << ", " << c;
  }
}

// Against float64 over the same bf16 values: the chain rounds 2·pairs sums, each by at most half an
// ulp of a partial sum, so its error is at most 2·pairs·2^-24 times the largest partial sum, and the
// partial sums are at most Σ|x·w|.
TEST(Bf16PairsTest, TheChainIsWithinItsRoundingBoundOfFloat64) {
  std::mt19937 rng(13);
  const int64_t rows = 5, pairs = 64, width = 40;
  const std::vector<uint32_t> x = RandomPairs(rows * pairs, rng, 1.0f), w = RandomPairs(pairs * width, rng, 1.0f);
  std::vector<float> y(rows * width);
  CombineBf16Pairs(x.data(), rows, pairs, w.data(), pairs, width, width, y.data(), width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t a = x[r * pairs + p], b = w[p * width + c];
        exact += static_cast<double>(Bf16PairLow(a)) * Bf16PairLow(b) + static_cast<double>(Bf16PairHigh(a)) * Bf16PairHigh(b);
        magnitude += std::fabs(static_cast<double>(Bf16PairLow(a)) * Bf16PairLow(b)) +
                     std::fabs(static_cast<double>(Bf16PairHigh(a)) * Bf16PairHigh(b));
      }
      EXPECT_LE(std::fabs(y[r * width + c] - exact), 2.0 * pairs * 0x1p-24 * magnitude) << r << ", " << c;
    }
  }
}

// Every e4m3 byte widens to the bf16 of its value (exact), at every position of a run of any length
// (the SIMD body and its scalar tail); the NaN codes give ±480.
TEST(Bf16PairsTest, WidenFp8ToBf16IsExactForEveryByte) {
  std::vector<uint8_t> bytes;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<uint8_t>((b * 37 + repeat) & 0xff));
  }
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, static_cast<int64_t>(bytes.size())}) {
    std::vector<uint16_t> out(n + 1, 0xdead);
    WidenFp8ToBf16(bytes.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t b = bytes[i];
      const float expected = (b & 0x7f) == 0x7f ? ((b & 0x80) ? -480.0f : 480.0f) : F8E4M3ToF32(b);
      ASSERT_EQ(std::bit_cast<uint32_t>(Bf16ToF32(out[i])), std::bit_cast<uint32_t>(expected))
          << "byte 0x" << std::hex << static_cast<int>(b) << " at " << std::dec << i << " of " << n;
    }
    ASSERT_EQ(out[n], 0xdead) << "wrote past n = " << n;
  }
}

}  // namespace
}  // namespace mtpspec
