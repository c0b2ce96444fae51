#include "bench/stream.h"

#include <atomic>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "core/parallel.h"

namespace mtpspec::bench {
namespace {

// One range per thread, at least 1 MiB each, so the split matches how the decode matmuls use the pool.
constexpr int64_t kMinChunkFloats = int64_t{1} << 18;

// Σ p[0..n) with independent accumulators so the loop is bound by loads, not by FMA latency.
float SumRange(const float* p, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(p + i));
    acc1 = _mm512_add_ps(acc1, _mm512_loadu_ps(p + i + 16));
    acc2 = _mm512_add_ps(acc2, _mm512_loadu_ps(p + i + 32));
    acc3 = _mm512_add_ps(acc3, _mm512_loadu_ps(p + i + 48));
  }
  float total = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
#else
  float total = 0.0f;
#endif
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace

float StreamSum(const float* data, int64_t n, ThreadPool& pool) {
  std::vector<float> partial(pool.num_threads(), 0.0f);
  std::atomic<int> next_slot{0};
  pool.ParallelFor(n, kMinChunkFloats, [&](int64_t begin, int64_t end) {
    partial[next_slot.fetch_add(1)] = SumRange(data + begin, end - begin);
  });
  float total = 0.0f;
  for (float v : partial) total += v;
  return total;
}

void StreamCopy(const float* src, float* dst, int64_t n, ThreadPool& pool) {
  pool.ParallelFor(n, kMinChunkFloats, [&](int64_t begin, int64_t end) {
    std::memcpy(dst + begin, src + begin, (end - begin) * sizeof(float));
  });
}

void StreamFill(float* data, int64_t n, ThreadPool& pool) {
  pool.ParallelFor(n, kMinChunkFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) data[i] = static_cast<float>(i & 1023) * (1.0f / 1024.0f);
  });
}

}  // namespace mtpspec::bench
