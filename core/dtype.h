// Element types that mtpspec reads from checkpoints and computes in.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mtpspec {

enum class DType : uint8_t {
  kF32,
  kF64,
  kBF16,
  kF16,
  kF8E4M3,  // float8_e4m3fn; weights come with 128x128 block scales (`weight_scale_inv`).
  kI8,
  kU8,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
const char* DTypeName(DType dtype);
// Parses a safetensors dtype string; unknown strings are an InvalidArgument error naming the string.
absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name);

// bf16 is the upper half of an IEEE float32.
inline float Bf16ToF32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round-to-nearest-even, NaN preserved (matches torch's float -> bfloat16 cast).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float f);
// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities, 0x7f/0xff are NaN.
float F8E4M3ToF32(uint8_t bits);
// The float8_e4m3fn nearest to f (ties to the even code); beyond ±448 saturates to ±448, NaN → 0x7f.
uint8_t F32ToF8E4M3(float f);

// The index of the first NaN or ±Inf in `values`, or -1 when all are finite. Scans by exponent bits
// (an OR-reduction the compiler vectorises) and only locates the element once one is found.
int64_t FirstNonFinite(std::span<const float> values);

}  // namespace mtpspec
