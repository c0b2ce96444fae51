// What bounds a decode GEMV: the Linear kernel on synthetic [out, 6144] weight matrices (GLM-5.2's
// hidden width) in bf16 and in FP8 with 128 × 128 block scales, for 1, 3 and 4 input rows, on 1 and 2
// threads, once with the matrix resident in L2 (1.5 MiB per thread, called over and over) and once
// streamed from memory (512 MiB, each call reads it once), next to the STREAM-style read bandwidth
// measured in the same run. The resident rate is the kernel's compute ceiling: a streamed GEMV
// cannot beat it whatever the memory can deliver. FP8 decode reaches its read bandwidth only where
// that ceiling lies above it. FP8 runs twice: marked free of NaN encodings, as the loader marks such
// a matrix (the direct widening), and unmarked (the fp16 route with its NaN check). Then an FP8
// matrix quantised from normally distributed weights as the releases quantise theirs runs with its
// input rows in f32, bf16 and fp8 (ActivationPrecision: the reduced ones take the pair tiles, whose
// speed depends on how often a line holds a zero or subnormal code, so they need realistic codes).
//
//   build/release/bench/linear_bench [--benchmark_filter=...]
//
// Counters: GB/s (weight bytes per second), Gw/s (weights per second), of_read (GB/s ÷ the read
// bandwidth of BM_StreamRead/1024 with the same thread count; 0 when it did not run first).
// BM_LinearPrefill times a prefill chunk (256 rows, or 64: a MoE expert's share of a 256-token chunk)
// through Linear's GEMM path (G multiply-adds per second).
// BM_AttentionRows times the row kernels of the absorbed attention (G multiply-adds per second),
// BM_KvBProjRows their FP8 products with kv_b_proj (weights per second).
// See bench/README.md for recorded results.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/kv_cache.h"
#include "attention/mla_bf16.h"
#include "bench/compute_ceilings.h"
#include "bench/stream.h"
#include "benchmark/benchmark.h"
#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/fp8_pairs.h"
#include "kernels/linear.h"
#include "kernels/pair_gemm.h"
#include "kernels/row_kernels.h"

namespace mtpspec::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kIn = 6144;                       // input width of every matrix
constexpr int64_t kResidentBytesPerThread = 3 << 19;  // 1.5 MiB: inside a 2 MiB L2 with x and y
constexpr int64_t kStreamedBytes = int64_t{512} << 20;
constexpr int64_t kStreamReadMiB = 1024;

double Elapsed(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  std::unique_ptr<ThreadPool>& pool = pools[threads];
  if (pool == nullptr) pool = std::make_unique<ThreadPool>(threads);
  return *pool;
}

std::map<int, double>& ReadBandwidth() {  // threads -> bytes/s of BM_StreamRead/1024
  static std::map<int, double> by_threads;
  return by_threads;
}

// A weight matrix of about `bytes` bytes: random bf16 in [-1, 1), or random FP8 codes (the NaN
// encodings 0x7f / 0xff left out, so the kernel runs its plain conversion) with random scales.
struct Matrix {
  Tensor data;    // [out, kIn] bf16 or F8_E4M3
  Tensor scales;  // [⌈out/128⌉, kIn/128] f32, FP8 only
  Tensor line_flags;  // the quantised FP8 matrix's Fp8PairLinesToFix, as the loader attaches them
  TensorView view;
  int64_t out = 0;
};

const Matrix& GetMatrix(DType dtype, int64_t bytes, bool quantised = false) {
  static std::map<std::tuple<int, int64_t, bool>, std::unique_ptr<Matrix>> cache;
  std::unique_ptr<Matrix>& m = cache[{static_cast<int>(dtype), bytes, quantised}];
  if (m != nullptr) return *m;
  m = std::make_unique<Matrix>();
  const int64_t width = DTypeSize(dtype);
  m->out = std::max<int64_t>(4, bytes / (kIn * width) / 4 * 4);
  m->data = Tensor::Empty(dtype, {m->out, kIn});
  std::mt19937 rng(20261204);
  if (quantised) {  // N(0, 1) weights quantised with max|w| / 448 block scales
    Tensor dense = Tensor::Empty(DType::kF32, {m->out, kIn});  // [out, kIn]
    std::normal_distribution<float> value(0.0f, 1.0f);
    for (int64_t i = 0; i < dense.numel(); ++i) dense.data<float>()[i] = value(rng);
    Fp8Matrix q = QuantiseFp8(dense.view(), /*power_of_two_scales=*/false, &Pool(2));
    m->data = std::move(q.codes);
    m->scales = std::move(q.scales);
    m->view = m->data.view();
    m->view.block_scale = m->scales.data<float>();
    m->view.scale_stride = m->scales.dim(1);
    m->view.fp8_nan_free = !Fp8HasNanCode(m->view);
    m->line_flags = Fp8PairLinesToFix(m->view);
    m->view.fp8_line_flags = reinterpret_cast<const uint64_t*>(m->line_flags.data<int64_t>());
    m->view.line_flag_stride = m->line_flags.dim(1);
  } else if (dtype == DType::kF8E4M3) {
    uint8_t* codes = m->data.data<uint8_t>();
    for (int64_t i = 0; i < m->out * kIn; ++i) {
      const uint8_t b = static_cast<uint8_t>(rng());
      codes[i] = (b & 0x7F) == 0x7F ? static_cast<uint8_t>(b ^ 1) : b;
    }
    m->scales = Tensor::Empty(DType::kF32, {(m->out + kFp8Block - 1) / kFp8Block, kIn / kFp8Block});
    std::uniform_real_distribution<float> scale(1e-4f, 1e-3f);
    for (int64_t i = 0; i < m->scales.numel(); ++i) m->scales.data<float>()[i] = scale(rng);
    m->view = m->data.view();
    m->view.block_scale = m->scales.data<float>();
    m->view.scale_stride = kIn / kFp8Block;
    m->view.fp8_nan_free = !Fp8HasNanCode(m->view);  // true: the codes above leave the NaNs out
  } else {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    uint16_t* w = m->data.data<uint16_t>();
    for (int64_t i = 0; i < m->out * kIn; ++i) w[i] = F32ToBf16(value(rng));
    m->view = m->data.view();
  }
  return *m;
}

// Input rows [rows, kIn] of values uniform in [-1, 1).
Tensor RandomRows(int64_t rows, unsigned seed) {
  Tensor x = Tensor::Empty(DType::kF32, {rows, kIn});  // [rows, kIn]
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = value(rng);
  return x;
}

void BM_StreamRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = kStreamReadMiB * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  static Tensor buffer;
  if (buffer.numel() != n) {
    buffer = Tensor::Empty(DType::kF32, {n});
    StreamFill(buffer.data<float>(), n, Pool(2));
  }
  ThreadPool& pool = Pool(threads);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(StreamSum(buffer.data<float>(), n, pool));
  const double bytes_per_s = 4.0 * static_cast<double>(n) * state.iterations() / Elapsed(start);
  state.counters["GB/s"] = bytes_per_s / 1e9;
  ReadBandwidth()[threads] = bytes_per_s;
}

// Args: dtype (0 = bf16, 1 = FP8 marked free of NaN encodings as loaded, 2 = the same FP8 unmarked,
// so the kernel checks for them; 3, 4, 5 = the quantised FP8 matrix with f32, bf16 and fp8
// activations), input rows, threads, resident (1) or streamed (0).
void BM_Linear(benchmark::State& state) {
  const int64_t kind = state.range(0);
  const DType dtype = kind >= 1 && kind <= 3 ? DType::kF8E4M3 : DType::kBF16;
  const int64_t rows = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const bool resident = state.range(3) == 1;
  const Matrix& m = GetMatrix(dtype, resident ? kResidentBytesPerThread * threads : kStreamedBytes, kind >= 3);
  TensorView view = m.view;
  if (kind == 2) view.fp8_nan_free = false;
  if (kind == 4) view.activations = ActivationPrecision::kBf16;
  if (kind == 5) view.activations = ActivationPrecision::kFp8;
  // x starts on a 64-byte line (a Tensor), so that a run does not depend on where the heap puts it:
  // a tile of several rows reads x for every 16 weights, and Linear copies rows off a line to one
  // only for ranges longer than the resident ones here.
  const Tensor x = RandomRows(rows, 7);  // [rows, kIn]
  std::vector<float> y(rows * m.out);     // [rows, out]
  ThreadPool& pool = Pool(threads);
  Linear(x.data<float>(), rows, view, y.data(), &pool);  // warm-up (and, resident, the load into L2)
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    Linear(x.data<float>(), rows, view, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double seconds = Elapsed(start);
  const double weights = static_cast<double>(m.out * kIn) * state.iterations();
  const double bytes_per_s = weights * DTypeSize(dtype) / seconds;
  state.counters["GB/s"] = bytes_per_s / 1e9;
  state.counters["Gw/s"] = weights / seconds / 1e9;
  const auto bw = ReadBandwidth().find(threads);
  state.counters["of_read"] = bw == ReadBandwidth().end() ? 0.0 : bytes_per_s / bw->second;
}

// A prefill chunk through one matrix: 256 input rows (the chunk decode_bench's BM_Prefill runs)
// against a [2048, 6144] matrix on 1 or 2 threads; Linear takes its GEMM path from 24 rows. Kinds:
// 0 = bf16 with f32 input rows, 1 = FP8 with f32 input rows (both widened to f32, Eigen's GEMM), 2
// and 3 = FP8 with the rows in bf16 and fp8, 4 = bf16 with the rows in bf16 (the pair GEMM,
// kernels/pair_gemm.h). Counters: G multiply-adds per second, and for the pair GEMM, its share of the
// cores' bf16 dot-product rate (compute_ceilings).
// Args: kind, threads, rows.
void BM_LinearPrefill(benchmark::State& state) {
  constexpr int64_t kOut = 2048;
  const int64_t kind = state.range(0);
  const int64_t rows = state.range(2);
  const DType dtype = kind >= 1 && kind <= 3 ? DType::kF8E4M3 : DType::kBF16;
  const int threads = static_cast<int>(state.range(1));
  const Matrix& m = GetMatrix(dtype, kOut * kIn * DTypeSize(dtype));
  TensorView view = m.view;
  if (kind == 2 || kind == 4) view.activations = ActivationPrecision::kBf16;
  if (kind == 3) view.activations = ActivationPrecision::kFp8;
  const Tensor x = RandomRows(rows, 8);  // [rows, kIn]
  std::vector<float> y(rows * m.out);      // [rows, out]
  ThreadPool& pool = Pool(threads);
  Linear(x.data<float>(), rows, view, y.data(), &pool);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    Linear(x.data<float>(), rows, view, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double macs_per_second = static_cast<double>(rows * m.out * kIn) * state.iterations() / Elapsed(start);
  state.counters["GMAC/s"] = macs_per_second / 1e9;
  if (kind >= 2) {
    static std::map<int, double> peak;  // threads → the bf16 dot-product rate
    if (!peak.contains(threads)) peak[threads] = Bf16DotMacsPerSecond(threads);
    state.counters["of_bf16_peak"] = peak[threads] > 0 ? macs_per_second / peak[threads] : 0.0;
    state.SetLabel(PairGemmIsaName(PairGemmBestIsa()));
  }
}

// The row kernels of the absorbed attention, one thread, at GLM-5.2's shape for one query row and
// half its heads (what one of two threads takes): 32 heads' latent queries [32, 512] against the
// 2048 selected cache rows [2048, 512] f32, scattered over a 16384-row cache: DotRows forms the
// scores, CombineRows the softmax-weighted latents. DotRows also runs over the first 64 elements of
// each row (the shape of the scores' rope part, d_r = 64) and the first 128 (the indexer's scores,
// d_I = 128), where its per-output reductions weigh most. Counter: G multiply-adds per second.
// Args: combine (0 = DotRows, 1 = CombineRows), width (elements of each row used).
void BM_AttentionRows(benchmark::State& state) {
  constexpr int64_t kHeads = 32, kKeys = 2048, kLatent = 512, kCacheRows = 16384;
  static const std::vector<float> cache = [] {
    std::vector<float> c(kCacheRows * kLatent);  // [kCacheRows, kLatent]
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (float& v : c) v = value(rng);
    return c;
  }();
  std::mt19937 rng(12);
  std::vector<const float*> keys(kKeys);  // [kKeys] the selected rows
  for (const float*& k : keys) k = cache.data() + static_cast<int64_t>(rng() % kCacheRows) * kLatent;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> queries(kHeads * kLatent), weights(kHeads * kKeys);  // [kHeads, kLatent], [kHeads, kKeys]
  for (float& v : queries) v = value(rng);
  for (float& v : weights) v = value(rng) / kKeys;
  std::vector<float> scores(kHeads * kKeys), latents(kHeads * kLatent);  // [kHeads, kKeys], [kHeads, kLatent]
  const bool combine = state.range(0) == 1;
  const int64_t width = state.range(1);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    if (combine) {
      CombineRows(weights.data(), kHeads, kKeys, keys.data(), kKeys, kLatent, latents.data(), kLatent);
      benchmark::DoNotOptimize(latents.data());
    } else {
      DotRows(queries.data(), kHeads, kLatent, keys.data(), kKeys, width, scores.data(), kKeys);
      benchmark::DoNotOptimize(scores.data());
    }
  }
  state.counters["GMAC/s"] = static_cast<double>(kHeads * kKeys * width) * state.iterations() / Elapsed(start) / 1e9;
}

// One query row's absorbed attention core over 2048 selected keys of a 16384-slot cache, at
// DeepSeek-V3.2's shape (128 heads, r_kv = 512, d_r = 64), on the default pool, heads split over its
// threads: with the f32 cache, the scores (DotRows over the latent and the rope parts), the softmax
// and the weighted latents (CombineRows); with the fp8 cache (attention/mla_bf16.h), each thread's
// own layout of the keys for the bf16 products (GatherBf16Keys, as MLA does) and then the same three
// steps in bf16 pair products. Counter: G multiply-adds per second (the two products' 2048 · 128 · 1088).
// Args: fp8 (0: f32 cache, 1: fp8 cache).
void BM_AttentionCore(benchmark::State& state) {
  constexpr int64_t kHeads = 128, kKeys = 2048, kLatent = 512, kRope = 64, kCacheRows = 16384;
  const bool fp8 = state.range(0) == 1;
  KvCacheShape shape;
  shape.latent_storage = fp8 ? LatentStorage::kFp8 : LatentStorage::kF32;
  shape.kv_lora_rank = kLatent;
  shape.rope_dim = kRope;
  shape.has_indexer = {false};
  KvCache cache(shape, kCacheRows);
  LayerKvCache& layer = cache.layer(0);
  std::mt19937 rng(15);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> latent(kLatent), rope(kRope);  // [r_kv], [d_r]
  for (int64_t j = 0; j < kCacheRows; ++j) {
    for (float& v : latent) v = unit(rng);
    for (float& v : rope) v = unit(rng);
    layer.StoreLatent(j, latent.data());
    layer.StoreRopeKey(j, rope.data());
  }
  std::vector<int32_t> keys(kKeys);  // [kKeys] the selection
  for (int32_t& k : keys) k = static_cast<int32_t>(rng() % kCacheRows);
  std::vector<float> q_lat(kHeads * kLatent), q_rope(kHeads * kRope), z(kHeads * kLatent);  // [heads, ·]
  for (float& v : q_lat) v = 0.05f * unit(rng);
  for (float& v : q_rope) v = 0.05f * unit(rng);
  std::vector<const float*> latent_rows(kKeys), rope_rows(kKeys);  // [kKeys]
  if (!fp8) {
    for (int64_t k = 0; k < kKeys; ++k) {
      latent_rows[k] = layer.latent.data<float>() + keys[k] * kLatent;
      rope_rows[k] = layer.rope_key.data<float>() + keys[k] * kRope;
    }
  }
  const float scale = 0.135f;
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    DefaultThreadPool().ParallelFor(kHeads, 1, [&](int64_t begin, int64_t end) {
      const int64_t heads = end - begin;
      if (fp8) {  // as MLA does: each thread lays out the keys for itself
        thread_local Bf16KeyBlock block;
        GatherBf16Keys(layer, keys, &block);
        AttendBf16Keys(q_lat.data() + begin * kLatent, q_rope.data() + begin * kRope, kRope, heads, kLatent, kRope,
                       scale, block, z.data() + begin * kLatent);
        return;
      }
      std::vector<float> scores(heads * kKeys);  // [heads, kKeys]
      DotRows(q_lat.data() + begin * kLatent, heads, kLatent, latent_rows.data(), kKeys, kLatent, scores.data(), kKeys);
      DotRows(q_rope.data() + begin * kRope, heads, kRope, rope_rows.data(), kKeys, kRope, scores.data(), kKeys,
              /*accumulate=*/true);
      for (int64_t h = 0; h < heads; ++h) {
        float* s = scores.data() + h * kKeys;
        for (int64_t k = 0; k < kKeys; ++k) s[k] *= scale;
        SoftmaxInPlace(s, kKeys);
      }
      CombineRows(scores.data(), heads, kKeys, latent_rows.data(), kKeys, kLatent, z.data() + begin * kLatent, kLatent);
    });
    benchmark::DoNotOptimize(z.data());
  }
  state.counters["GMAC/s"] =
      static_cast<double>(kHeads * kKeys * (2 * kLatent + kRope)) * state.iterations() / Elapsed(start) / 1e9;
}

// The absorbed attention's products with kv_b_proj in FP8, one thread, at GLM-5.2's shape for one
// query row (or three) and half its 64 heads: per head, the query's fold through W_UK (CombineRows over
// the head's 192 rows of [512]) and the un-absorb through W_UV (DotRows over its 256 rows), on FP8
// rows with their block scales. The 32 heads' rows are 7.3 MB, read from the last-level cache call
// after call. Counter: Gw/s (weights per second).
// Args: unabsorb (0: the W_UK fold, 1: the W_UV un-absorb), rows.
void BM_KvBProjRows(benchmark::State& state) {
  constexpr int64_t kHeads = 32, kNope = 192, kValue = 256, kLatent = 512;
  constexpr int64_t kRowsPerHead = kNope + kValue;
  constexpr int64_t kMatrixRows = kHeads * kRowsPerHead;
  static const Fp8Matrix matrix = [] {  // kv_b_proj's rows for 32 heads, quantised as the releases store them
    Tensor dense = Tensor::Empty(DType::kF32, {kMatrixRows, kLatent});  // [kMatrixRows, kLatent]
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (int64_t i = 0; i < dense.numel(); ++i) dense.data<float>()[i] = value(rng);
    return QuantiseFp8(dense.view(), /*power_of_two_scales=*/false);
  }();
  const bool fold = state.range(0) == 0;
  const int64_t rows = state.range(1);
  std::vector<Fp8ScaledRow> w(kMatrixRows);  // [kMatrixRows]
  for (int64_t o = 0; o < kMatrixRows; ++o) {
    w[o] = {matrix.codes.data<uint8_t>() + o * kLatent, matrix.scales.data<float>() + (o / kFp8Block) * matrix.scales.dim(1)};
  }
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> q_nope(rows * kHeads * kNope), z(rows * kHeads * kLatent);  // [rows, kHeads, 192], [rows, kHeads, 512]
  for (float& v : q_nope) v = value(rng);
  for (float& v : z) v = value(rng);
  std::vector<float> q_latent(rows * kHeads * kLatent), out(rows * kHeads * kValue);  // [rows, kHeads, 512], [rows, kHeads, 256]
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const Fp8ScaledRow* head = w.data() + h * kRowsPerHead;
      if (fold) {
        CombineRows(q_nope.data() + h * kNope, rows, kHeads * kNope, head, kNope, kLatent,
                    q_latent.data() + h * kLatent, kHeads * kLatent);
      } else {
        DotRows(z.data() + h * kLatent, rows, kHeads * kLatent, head + kNope, kValue, kLatent,
                out.data() + h * kValue, kHeads * kValue);
      }
    }
    benchmark::DoNotOptimize(q_latent.data());
    benchmark::DoNotOptimize(out.data());
  }
  const int64_t weights = kHeads * (fold ? kNope : kValue) * kLatent;
  state.counters["Gw/s"] = static_cast<double>(weights) * state.iterations() / Elapsed(start) / 1e9;
}

BENCHMARK(BM_StreamRead)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_Linear)
    ->ArgNames({"fp8", "rows", "threads", "resident"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 3, 4}, {1, 2}, {1, 0}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_LinearPrefill)
    ->ArgNames({"kind", "threads", "rows"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}, {256, 64}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_AttentionRows)
    ->ArgNames({"combine", "width"})
    ->Args({0, 512})
    ->Args({1, 512})
    ->Args({0, 128})
    ->Args({0, 64})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK(BM_AttentionCore)->ArgName("fp8")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_KvBProjRows)
    ->ArgNames({"unabsorb", "rows"})
    ->ArgsProduct({{0, 1}, {1, 3}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace
}  // namespace mtpspec::bench

BENCHMARK_MAIN();
