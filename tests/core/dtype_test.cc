// Conversions between f32 and the narrow float formats, checked against float64 formulas written
// here from the format definitions rather than against the implementation's own bit tricks.
#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <random>

#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Value of a sign-magnitude binary float code with `exp_bits`/`mant_bits`, IEEE-style (the all-ones
// exponent is inf/NaN). Subnormals have exponent 1 - bias.
double IeeeValue(uint32_t code, int exp_bits, int mant_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool negative = (code >> (exp_bits + mant_bits)) & 1;
  const int exponent = (code >> mant_bits) & ((1 << exp_bits) - 1);
  const uint32_t mantissa = code & ((1u << mant_bits) - 1);
  const double fraction = mantissa / std::pow(2.0, mant_bits);
  double value;
  if (exponent == (1 << exp_bits) - 1) {
    value = mantissa ? std::nan("") : INFINITY;
  } else if (exponent == 0) {
    value = fraction * std::pow(2.0, 1 - bias);
  } else {
    value = (1.0 + fraction) * std::pow(2.0, exponent - bias);
  }
  return negative ? -value : value;
}

// Rounds |x| to the nearest non-negative code in [0, inf_code], ties to the even code, where the
// codes decode monotonically through `decode` and inf_code counts as the value `overflow_value`
// (one ulp step past the largest finite value), which is how IEEE defines overflow to infinity.
uint32_t ReferenceRoundMagnitude(double magnitude, const std::function<double(uint32_t)>& decode,
                                 uint32_t inf_code, double overflow_value) {
  const auto value = [&](uint32_t c) { return c == inf_code ? overflow_value : decode(c); };
  if (magnitude >= overflow_value) return inf_code;
  uint32_t low = 0, high = inf_code;  // value(low) <= magnitude < value(high)
  while (high - low > 1) {
    const uint32_t mid = (low + high) / 2;
    (value(mid) <= magnitude ? low : high) = mid;
  }
  const double below = magnitude - value(low), above = value(high) - magnitude;
  if (below < above) return low;
  if (above < below) return high;
  return (low % 2 == 0) ? low : high;
}

uint16_t ReferenceF32ToBf16(float f) {
  const uint32_t sign = BitsOf(f) & 0x80000000u;
  const uint32_t magnitude = ReferenceRoundMagnitude(
      std::fabs(static_cast<double>(f)), [](uint32_t c) { return IeeeValue(c, 8, 7); }, 0x7f80,
      std::ldexp(1.0, 128));
  return static_cast<uint16_t>((sign >> 16) | magnitude);
}

uint16_t ReferenceF32ToF16(float f) {
  const uint32_t sign = BitsOf(f) & 0x80000000u;
  const uint32_t magnitude = ReferenceRoundMagnitude(
      std::fabs(static_cast<double>(f)), [](uint32_t c) { return IeeeValue(c, 5, 10); }, 0x7c00,
      65536.0);
  return static_cast<uint16_t>((sign >> 16) | magnitude);
}

TEST(Bf16Test, DecodesEveryCode) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const double expected = IeeeValue(code, 8, 7);
    const float actual = Bf16ToF32(static_cast<uint16_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << std::hex << code;
    } else {
      EXPECT_EQ(static_cast<double>(actual), expected) << std::hex << code;
      EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << std::hex << code;
    }
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, 0x3f80 is even
  EXPECT_EQ(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, 0x3f82 is even
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(FloatOf(0x00008000u)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(F32ToBf16(FloatOf(0x00018000u)), 0x0002);
  EXPECT_EQ(F32ToBf16(FloatOf(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds up to +inf
  EXPECT_EQ(F32ToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(F32ToBf16(-INFINITY), 0xff80);
}

TEST(Bf16Test, KeepsNaNsNaN) {
  for (uint32_t bits :
       {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u, 0x7f80ffffu}) {
    const uint16_t converted = F32ToBf16(FloatOf(bits));
    EXPECT_TRUE(std::isnan(Bf16ToF32(converted))) << std::hex << bits;
    EXPECT_EQ(converted & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
  }
  EXPECT_EQ(F32ToBf16(FloatOf(0x7fc00000u)), 0x7fc0);
}

TEST(Bf16Test, MatchesReferenceOnRandomFloats) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) {
    const float f = FloatOf(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBf16(f), ReferenceF32ToBf16(f)) << std::hex << BitsOf(f);
  }
}

TEST(F16Test, DecodesEveryCodeIncludingSubnormalsAndInf) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const double expected = IeeeValue(code, 5, 10);
    const float actual = F16ToF32(static_cast<uint16_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << std::hex << code;
    } else {
      EXPECT_EQ(static_cast<double>(actual), expected) << std::hex << code;
      EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << std::hex << code;
    }
  }
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x7c00), INFINITY);
  EXPECT_EQ(F16ToF32(0xfc00), -INFINITY);
}

TEST(F16Test, EncodesEveryCodeBackToItself) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const float value = F16ToF32(static_cast<uint16_t>(code));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(value)))) << std::hex << code;
    } else {
      EXPECT_EQ(F32ToF16(value), code) << std::hex << code;
    }
  }
}

TEST(F16Test, RoundsToNearestEven) {
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // tie between 65504 and "65536" goes to even: inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24
  EXPECT_EQ(F32ToF16(1.5f * std::ldexp(1.0f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(3.0f * std::ldexp(1.0f, -25)), 0x0002);  // tie between codes 1 and 2
  EXPECT_EQ(F32ToF16(-INFINITY), 0xfc00);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f = (i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(F32ToF16(f), ReferenceF32ToF16(f)) << f;
  }
}

TEST(F8E4M3Test, DecodesAll256Codes) {
  for (int code = 0; code < 256; ++code) {
    const bool negative = code & 0x80;
    const int exponent = (code >> 3) & 0xf;
    const int mantissa = code & 0x7;
    const float actual = F8E4M3ToF32(static_cast<uint8_t>(code));
    if (exponent == 0xf && mantissa == 0x7) {  // e4m3fn has no inf; only these two codes are NaN
      EXPECT_TRUE(std::isnan(actual)) << code;
      continue;
    }
    const double magnitude = exponent == 0 ? (mantissa / 8.0) * std::pow(2.0, -6)
                                           : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
    EXPECT_EQ(static_cast<double>(actual), negative ? -magnitude : magnitude) << code;
    EXPECT_EQ(std::signbit(actual), negative) << code;
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);  // exponent 15 is finite in e4m3fn
}

// The encoder the random FP8 checkpoints use: every finite code round-trips, values between two
// codes go to the nearer one (ties to the even code), beyond ±448 saturates, NaN stays NaN.
TEST(F8E4M3Test, EncodesToTheNearestCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float value = F8E4M3ToF32(static_cast<uint8_t>(code));
    EXPECT_EQ(F32ToF8E4M3(value), code == 0x80 ? 0x80 : code) << code;
  }
  for (int code = 0; code < 0x7e; ++code) {
    const double lo = F8E4M3ToF32(static_cast<uint8_t>(code)), hi = F8E4M3ToF32(static_cast<uint8_t>(code + 1));
    const double mid = (lo + hi) / 2;
    EXPECT_EQ(F32ToF8E4M3(static_cast<float>(lo + (mid - lo) / 2)), code) << code;
    EXPECT_EQ(F32ToF8E4M3(static_cast<float>(mid + (hi - mid) / 2)), code + 1) << code;
    EXPECT_EQ(F32ToF8E4M3(static_cast<float>(mid)), code % 2 == 0 ? code : code + 1) << "tie at " << code;
    EXPECT_EQ(F32ToF8E4M3(static_cast<float>(-mid)), 0x80 | (code % 2 == 0 ? code : code + 1)) << "tie at " << code;
  }
  EXPECT_EQ(F32ToF8E4M3(1000.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::nanf("")), 0x7f);
}

TEST(DTypeTest, NamesRoundTripThroughTheParser) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kF8E4M3,
                      DType::kI8, DType::kU8, DType::kI32, DType::kI64, DType::kBool}) {
    absl::StatusOr<DType> parsed = ParseSafetensorsDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  absl::StatusOr<DType> bad = ParseSafetensorsDType("F4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("F4"), std::string_view::npos);
}

TEST(DTypeTest, ToF32WidensEveryFloatFormat) {
  uint16_t bf16[2] = {0x3f80, 0xc000};  // [2]: 1, -2
  uint16_t f16[2] = {0x3c00, 0x0001};   // [2]: 1, 2^-24
  uint8_t f8[2] = {0x7e, 0x38};         // [2]: 448, 1
  absl::StatusOr<Tensor> from_bf16 = ToF32(TensorView::Contiguous(DType::kBF16, bf16, {2}));
  absl::StatusOr<Tensor> from_f16 = ToF32(TensorView::Contiguous(DType::kF16, f16, {2}));
  absl::StatusOr<Tensor> from_f8 = ToF32(TensorView::Contiguous(DType::kF8E4M3, f8, {2}));
  ASSERT_TRUE(from_bf16.ok() && from_f16.ok() && from_f8.ok());
  EXPECT_EQ(from_bf16->data<float>()[1], -2.0f);
  EXPECT_EQ(from_f16->data<float>()[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(from_f8->data<float>()[0], 448.0f);
  EXPECT_EQ(from_f8->data<float>()[1], 1.0f);
  int32_t ints[1] = {3};  // [1]
  EXPECT_FALSE(ToF32(TensorView::Contiguous(DType::kI32, ints, {1})).ok());
}

// FirstNonFinite against std::isfinite at every place, across the scan's 4096-element blocks.
TEST(DTypeTest, FirstNonFiniteFindsTheFirstNanOrInf) {
  std::vector<float> values(10000, 1.5f);
  EXPECT_EQ(FirstNonFinite(values), -1);
  EXPECT_EQ(FirstNonFinite(std::span<const float>()), -1);
  values[1] = std::numeric_limits<float>::max();  // large but finite
  values[2] = -std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(FirstNonFinite(values), -1);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    for (const int64_t at : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{9999}}) {
      std::vector<float> v = values;
      v[static_cast<size_t>(at)] = bad;
      if (at < 9999) v[9999] = bad;  // a later one must not hide the first
      EXPECT_EQ(FirstNonFinite(v), at) << bad << " at " << at;
    }
  }
}

}  // namespace
}  // namespace mtpspec
