#include "bench/compute_ceilings.h"

#include <algorithm>
#include <random>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "bench/run_info.h"
#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/linear.h"
#include "kernels/pair_gemm.h"
#include "kernels/row_kernels.h"

namespace mtpspec::bench {
namespace {

constexpr int kPasses = 3;
constexpr double kPassSeconds = 0.3;

// The best rate (work per second) of kPasses passes, each repeating `call` (which does `work` units)
// for at least kPassSeconds.
template <typename Call>
double BestRate(double work, Call call) {
  call();  // warm-up: caches filled, pool threads awake
  double best = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const double start = NowSeconds();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      call();
      ++calls;
      elapsed = NowSeconds() - start;
    } while (elapsed < kPassSeconds);
    best = std::max(best, work * static_cast<double>(calls) / elapsed);
  }
  return best;
}

// One row against an FP8 matrix of about 1 MiB per thread (inside each core's L2, with x and y): a
// random matrix quantised as the releases store theirs (core/fp8_quantise.h), its Linear taking the
// row in `activations`.
double Fp8GemvRate(int64_t hidden, int threads, ActivationPrecision activations) {
  const int64_t out = std::max<int64_t>(kFp8Block, (int64_t{1} << 20) * threads / hidden / kFp8Block * kFp8Block);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Tensor dense = Tensor::Empty(DType::kF32, {out, hidden});  // [out, hidden]
  for (int64_t i = 0; i < dense.numel(); ++i) dense.data<float>()[i] = unit(rng);
  const Fp8Matrix fp8 = QuantiseFp8(dense.view(), /*power_of_two_scales=*/false);
  TensorView view = fp8.codes.view();
  view.block_scale = fp8.scales.data<float>();
  view.scale_stride = fp8.scales.dim(1);
  view.fp8_nan_free = !Fp8HasNanCode(view);
  view.activations = activations;
  std::vector<float> x(hidden), y(out);  // [hidden], [out]
  for (float& v : x) v = unit(rng);
  return BestRate(static_cast<double>(out * hidden), [&] { Linear(x.data(), 1, view, y.data()); });
}

// Each thread: 32 queries against 256 cache rows of 512 f32 (512 KiB), its own.
double RowKernelRate(int threads) {
  constexpr int64_t kQueries = 32, kKeys = 256, kWidth = 512;
  struct Work {
    std::vector<float> cache, queries, scores;  // [kKeys, kWidth], [kQueries, kWidth], [kQueries, kKeys]
    std::vector<const float*> keys;             // [kKeys]
  };
  std::vector<Work> work(threads);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (Work& t : work) {
    t.cache.resize(kKeys * kWidth);
    t.queries.resize(kQueries * kWidth);
    t.scores.resize(kQueries * kKeys);
    for (float& v : t.cache) v = unit(rng);
    for (float& v : t.queries) v = unit(rng);
    for (int64_t k = 0; k < kKeys; ++k) t.keys.push_back(t.cache.data() + k * kWidth);
  }
  const double macs = static_cast<double>(threads * kQueries * kKeys * kWidth);
  return BestRate(macs, [&] {
    DefaultThreadPool().ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        Work& t = work[i];
        DotRows(t.queries.data(), kQueries, kWidth, t.keys.data(), kKeys, kWidth, t.scores.data(), kKeys);
      }
    });
  });
}

#if defined(__AVX512F__)
// 12 independent chains of 512-bit multiply-adds, 2^16 rounds: enough in flight for the multiply-add
// units' latency, nothing read from memory.
float FmaChains(float seed) {
  __m512 acc[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int round = 0; round < (1 << 16); ++round) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
      asm("" : "+v"(acc[i]));  // keeps the chains from being folded away
    }
  }
  __m512 sum = acc[0];
#pragma GCC unroll 12
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

double FmaRate(int threads) {
  std::vector<float> sink(threads);
  const double macs = static_cast<double>(threads) * 12 * 16 * (1 << 16);
  return BestRate(macs, [&] {
    DefaultThreadPool().ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sink[i] += FmaChains(static_cast<float>(i));
    });
  });
}
#else
double FmaRate(int /*threads*/) { return 0.0; }
#endif

// 12 independent chains of VDPBF16PS (32 multiply-adds each), 2^16 rounds, on registers alone.
// Every loop over the chains is unrolled: a loop left rolled keeps the array on the stack, and each
// step then waits on a store and a reload instead of the dot-product unit.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) float Bf16DotChains(float seed) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
#pragma GCC unroll 24
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f7f3f7f));  // pairs of 0.996
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3a833a83));  // pairs of 0.001
  for (int round = 0; round < (1 << 16); ++round) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      asm("" : "+v"(acc[i]));  // keeps the chains from being folded away
    }
  }
  __m512 sum = acc[0];
#pragma GCC unroll 24
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

double Bf16DotMacsPerSecond(int threads) {
  if (PairGemmBestIsa() != PairGemmIsa::kAvx512Bf16) return 0.0;
  std::vector<float> sink(threads);
  const double macs = static_cast<double>(threads) * 12 * 32 * (1 << 16);
  return BestRate(macs, [&] {
    DefaultThreadPool().ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sink[i] += Bf16DotChains(static_cast<float>(i));
    });
  });
}


nlohmann::json MeasureComputeCeilings(int64_t hidden) {
  const int threads = DefaultThreadPool().num_threads();
  return {{"threads", threads},
          {"fp8_gemv_weights_per_second", Fp8GemvRate(hidden, threads, ActivationPrecision::kF32)},
          {"fp8_gemv_bf16_activations_weights_per_second", Fp8GemvRate(hidden, threads, ActivationPrecision::kBf16)},
          {"fp8_gemv_fp8_activations_weights_per_second", Fp8GemvRate(hidden, threads, ActivationPrecision::kFp8)},
          {"f32_row_kernel_macs_per_second", RowKernelRate(threads)},
          {"fma_macs_per_second", FmaRate(threads)},
          {"bf16_dot_macs_per_second", Bf16DotMacsPerSecond(threads)}};
}

}  // namespace mtpspec::bench
