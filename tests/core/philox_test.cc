#include "core/philox.h"

#include <array>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

// Known-answer vectors for Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformIsAPureFunctionOfItsArguments) {
  const double first = UniformAt(42, 7, 1);
  (void)UniformAt(42, 8, 1);  // no hidden state between calls
  EXPECT_EQ(UniformAt(42, 7, 1), first);
  EXPECT_NE(UniformAt(42, 7, 0), first);
  EXPECT_NE(UniformAt(43, 7, 1), first);
  EXPECT_NE(UniformAt(42, 7 + (uint64_t{1} << 32), 1), first);  // high position bits matter
  EXPECT_NE(UniformAt(42 + (uint64_t{1} << 32), 7, 1), first);  // high seed bits matter
}

TEST(PhiloxTest, UniformStaysInUnitIntervalWith53Bits) {
  bool saw_odd_multiple = false;  // a value needing all 53 bits is an odd multiple of 2^-53
  for (uint64_t position = 0; position < 10000; ++position) {
    const double u = UniformAt(5, position);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const double scaled = std::ldexp(u, 53);
    ASSERT_EQ(scaled, std::floor(scaled));
    if (std::fmod(scaled, 2.0) == 1.0) saw_odd_multiple = true;
  }
  EXPECT_TRUE(saw_odd_multiple);
}

// Pearson chi-square over 100 equal bins with 10^5 draws. The statistic has 99 degrees of freedom;
// P(chi2 > 148.2) = 0.001, so a correct generator essentially never fails (and the draws are
// fixed).
double ChiSquare(uint64_t seed, uint32_t stream) {
  constexpr int kBins = 100;
  constexpr int kDraws = 100000;
  std::vector<int> counts(kBins, 0);
  for (uint64_t position = 0; position < kDraws; ++position) {
    ++counts[static_cast<int>(UniformAt(seed, position, stream) * kBins)];
  }
  const double expected = static_cast<double>(kDraws) / kBins;
  double statistic = 0;
  for (int count : counts) statistic += (count - expected) * (count - expected) / expected;
  return statistic;
}

TEST(PhiloxTest, UniformPassesChiSquare) {
  EXPECT_LT(ChiSquare(0, 0), 148.2);
  EXPECT_LT(ChiSquare(0x5eed, 1), 148.2);
  EXPECT_LT(ChiSquare(~uint64_t{0}, 7), 148.2);
}

TEST(PhiloxTest, StreamsAreUncorrelated) {
  constexpr int kDraws = 100000;
  double sum_xy = 0, sum_x = 0, sum_y = 0, sum_xx = 0, sum_yy = 0;
  for (uint64_t position = 0; position < kDraws; ++position) {
    const double x = UniformAt(9, position, 0), y = UniformAt(9, position, 1);
    sum_x += x, sum_y += y, sum_xy += x * y, sum_xx += x * x, sum_yy += y * y;
  }
  const double n = kDraws;
  const double correlation = (sum_xy - sum_x * sum_y / n) /
                             std::sqrt((sum_xx - sum_x * sum_x / n) * (sum_yy - sum_y * sum_y / n));
  EXPECT_LT(std::fabs(correlation), 0.015);  // about 4.7 standard errors of 1/sqrt(n)
}

}  // namespace
}  // namespace mtpspec
