// Philox4x32-10 for device code: the same rounds, key schedule and counter layout as
// core/philox.cc, so UniformAtDevice(seed, position, stream) is bit for bit UniformAt's value.
// Included by *.cu files only.
#pragma once

#include <cstdint>

namespace mtpspec::cuda {

// Ten rounds over counter[4] with key[2] (copied); returns the four output words in out[4].
__host__ __device__ inline void Philox4x32Device(const uint32_t counter[4], const uint32_t key_in[2],
                                                 uint32_t out[4]) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u;
  constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kKeyIncrement0 = 0x9E3779B9u;
  constexpr uint32_t kKeyIncrement1 = 0xBB67AE85u;
  uint32_t x0 = counter[0], x1 = counter[1], x2 = counter[2], x3 = counter[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kKeyIncrement0;
      k1 += kKeyIncrement1;
    }
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * x0;
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * x2;
    const uint32_t high0 = static_cast<uint32_t>(product0 >> 32);
    const uint32_t low0 = static_cast<uint32_t>(product0);
    const uint32_t high1 = static_cast<uint32_t>(product1 >> 32);
    const uint32_t low1 = static_cast<uint32_t>(product1);
    const uint32_t y0 = high1 ^ x1 ^ k0;
    const uint32_t y2 = high0 ^ x3 ^ k1;
    x0 = y0;
    x1 = low1;
    x2 = y2;
    x3 = low0;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
}

// UniformAt (core/philox.h): key = seed (low word first), counter = (position low, position high,
// stream, 0); the top 53 of the first two words' 64 bits, scaled to [0, 1).
__host__ __device__ inline double UniformAtDevice(uint64_t seed, uint64_t position, uint32_t stream) {
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const uint32_t counter[4] = {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), stream, 0u};
  uint32_t words[4];
  Philox4x32Device(counter, key, words);
  const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace mtpspec::cuda
