#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mtpspec {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name) {
  static constexpr DType kAll[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kF8E4M3,
                                   DType::kI8,  DType::kU8,  DType::kI32,  DType::kI64, DType::kBool};
  for (DType d : kAll) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", std::string(name), "\""));
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(mant), -24);  // subnormal
  } else if (exp == 31) {
    value = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign ? -value : value;
}

uint16_t F32ToF16(float f) {
  // IEEE binary16 with round-to-nearest-even, written out so it builds without compiler
  // _Float16 support.
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (≥ 65520)
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value = abs_float / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 … 24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));  // rebias exponent 127 → 15
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal codes m · 2^-9, m = 0 … 8 (8 is the first normal)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // exact scaling, ties to even
  }
  uint32_t u;
  std::memcpy(&u, &a, sizeof u);
  int exponent = static_cast<int>(u >> 23) - 127;  // -6 … 8
  uint32_t mantissa = (u & 0x7fffffu) >> 20;       // the top 3 of 23 bits
  const uint32_t rest = u & 0xfffffu, half = 0x80000u;
  if (rest > half || (rest == half && (mantissa & 1u))) ++mantissa;
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int code = std::min((exponent + 7) << 3 | static_cast<int>(mantissa), 0x7e);
  return sign | static_cast<uint8_t>(code);
}

namespace {

// The value of one float8_e4m3fn byte, from its fields.
constexpr float DecodeF8E4M3(uint8_t b) {
  const uint32_t sign = (b >> 7) & 1u;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  float value = 0.0f;
  if (exp == 0xf && mant == 0x7) {
    value = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    value = static_cast<float>(mant) / 512.0f;  // subnormal: mant/8 * 2^-6, exact
  } else {
    value = std::bit_cast<float>((exp + 120u) << 23 | mant << 20);  // (1 + mant/8) * 2^(exp-7)
  }
  return sign ? -value : value;
}

struct F8E4M3Table {
  float value[256] = {};
  constexpr F8E4M3Table() {
    for (int b = 0; b < 256; ++b) value[b] = DecodeF8E4M3(static_cast<uint8_t>(b));
  }
};

constexpr F8E4M3Table kF8E4M3Values;  // every byte, decoded at compile time

}  // namespace

float F8E4M3ToF32(uint8_t b) { return kF8E4M3Values.value[b]; }

int64_t FirstNonFinite(std::span<const float> values) {
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < values.size(); begin += kBlock) {
    const size_t end = std::min(values.size(), begin + kBlock);
    uint32_t saturated = 0;  // any element whose exponent bits are all ones
    for (size_t i = begin; i < end; ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
      saturated |= static_cast<uint32_t>((bits & kExponent) == kExponent);
    }
    if (saturated == 0) continue;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

}  // namespace mtpspec
