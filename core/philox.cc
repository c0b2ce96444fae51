#include "core/philox.h"

namespace mtpspec {
namespace {

// Round multipliers and the Weyl-sequence key increments from the Philox paper.
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyIncrement0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kKeyIncrement1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kRounds = 10;

// One round: two 32x32->64 multiplies; the high halves are mixed with the key and the other words,
// and the words are permuted.
inline PhiloxCounter Round(const PhiloxCounter& x, const PhiloxKey& key) {
  const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * x[0];
  const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * x[2];
  const uint32_t high0 = static_cast<uint32_t>(product0 >> 32);
  const uint32_t low0 = static_cast<uint32_t>(product0);
  const uint32_t high1 = static_cast<uint32_t>(product1 >> 32);
  const uint32_t low1 = static_cast<uint32_t>(product1);
  return {high1 ^ x[1] ^ key[0], low1, high0 ^ x[3] ^ key[1], low0};
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kKeyIncrement0;
      key[1] += kKeyIncrement1;
    }
    counter = Round(counter, key);
  }
  return counter;
}

double UniformAt(uint64_t seed, uint64_t position, uint32_t stream) {
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const PhiloxCounter counter = {static_cast<uint32_t>(position),
                                 static_cast<uint32_t>(position >> 32), stream, 0};
  const std::array<uint32_t, 4> words = Philox4x32(counter, key);
  // 64 random bits, keep the top 53: k / 2^53 is exactly representable and lies in [0, 1).
  const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace mtpspec
