// STREAM-style memory bandwidth kernels on the project's ThreadPool: the ceiling a decode step's
// weight streaming is compared against.
#pragma once

#include <cstdint>

namespace mtpspec {
class ThreadPool;
}

namespace mtpspec::bench {

// Σ data[i] over n floats, split into one contiguous range per pool thread. Reads 4·n bytes.
float StreamSum(const float* data, int64_t n, ThreadPool& pool);

// dst[i] = src[i] for n floats, one contiguous range per pool thread. Moves 8·n bytes (4·n read,
// 4·n written; STREAM's convention, write-allocate traffic not counted).
void StreamCopy(const float* src, float* dst, int64_t n, ThreadPool& pool);

// Fills data[i] with small distinct values, touching every page (first-touch happens here, on
// the pool's threads, not inside a timed loop).
void StreamFill(float* data, int64_t n, ThreadPool& pool);

}  // namespace mtpspec::bench
