// Philox4x32-10, a counter-based random number generator (Salmon, Moraes, Dror, Shaw: "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011). Output is a pure function of (counter, key), so a
// sampler can ask for "the uniform for sequence position p of seed s" with no generator state:
// replaying a request, or drawing positions in any order or on any thread, gives the same numbers.
#pragma once

#include <array>
#include <cstdint>

namespace mtpspec {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten Philox rounds over `counter` with `key`; returns four independent 32-bit words.
std::array<uint32_t, 4> Philox4x32(PhiloxCounter counter, PhiloxKey key);

// A uniform double in [0, 1) with 53 random bits, determined by (seed, position, stream) alone.
// The seed is the key (low word first); the counter is (position low, position high, stream, 0).
// Use `stream` to draw several independent values for the same position (e.g. 0 for the
// acceptance test and 1 for the residual sample of speculative decoding).
double UniformAt(uint64_t seed, uint64_t position, uint32_t stream = 0);

}  // namespace mtpspec
