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

// The last-level cache's size in bytes as the OS reports it (sysconf), or 0 when it reports none.
int64_t LastLevelCacheBytes();

// Evicts the caches: streams a buffer of twice the last-level cache (at least 64 MiB, at most
// 1 GiB; allocated on first use) through the pool. A draft step's weights (the MTP layer and its
// head: ~100 MB on the bench model) fit this machine's 260 MB L3, so timed back to back they read
// from it; in a decode cycle a verify that streams more than the L3 runs between them, and they read
// from memory. Costs one pass over the buffer (~20 ms here).
void EvictCaches(ThreadPool& pool);

// Fills data[i] with small distinct values, touching every page (first-touch happens here, on
// the pool's threads, not inside a timed loop).
void StreamFill(float* data, int64_t n, ThreadPool& pool);

}  // namespace mtpspec::bench
