#include "core/linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <immintrin.h>

#include "Eigen/Core"
#include "core/parallel.h"
#include "core/status.h"

namespace mtpspec {
namespace {

// Number of input rows handled together against one weight row (the weight row is loaded once
// into registers per chunk and multiplied into kRowBlock accumulators).
constexpr int kRowBlock = 4;

#if defined(__AVX512F__)
inline __m512 LoadBf16x16(const uint16_t* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 LoadF32x16(const float* p) { return _mm512_loadu_ps(p); }
#endif

inline float WeightAt(const float* w, int64_t i) { return w[i]; }
inline float WeightAt(const uint16_t* w, int64_t i) { return Bf16ToF32(w[i]); }

// acc[r] = Σ_i x[r][i] · w[i] for r < nrows (nrows ≤ kRowBlock).
template <typename W>
void DotRows(const float* const* x, int nrows, const W* w, int64_t n, float* acc) {
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 sum[kRowBlock];
  for (int r = 0; r < kRowBlock; ++r) sum[r] = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    __m512 wv;
    if constexpr (std::is_same_v<W, uint16_t>) {
      wv = LoadBf16x16(w + i);
    } else {
      wv = LoadF32x16(w + i);
    }
    for (int r = 0; r < nrows; ++r) sum[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[r] + i), sum[r]);
  }
  for (int r = 0; r < nrows; ++r) acc[r] = _mm512_reduce_add_ps(sum[r]);
#else
  for (int r = 0; r < nrows; ++r) acc[r] = 0.0f;
#endif
  for (; i < n; ++i) {
    const float wi = WeightAt(w, i);
    for (int r = 0; r < nrows; ++r) acc[r] += wi * x[r][i];
  }
}

template <typename W>
void LinearSmallRows(const float* x, int64_t rows, const W* w, int64_t w_stride, int64_t in, int64_t o_begin,
                     int64_t o_end, int64_t y_stride, int64_t y_col0, float* y) {
  const float* xr[kRowBlock];
  float acc[kRowBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int nr = static_cast<int>(std::min<int64_t>(kRowBlock, rows - r0));
    for (int r = 0; r < nr; ++r) xr[r] = x + (r0 + r) * in;
    for (int64_t o = o_begin; o < o_end; ++o) {
      DotRows(xr, nr, w + o * w_stride, in, acc);
      for (int r = 0; r < nr; ++r) y[(r0 + r) * y_stride + (o - y_col0)] = acc[r];
    }
  }
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Many rows: widen a block of weight rows to f32 and let Eigen's GEMM do the work.
template <typename W>
void LinearManyRows(const float* x, int64_t rows, const W* w, int64_t w_stride, int64_t in, int64_t o_begin,
                    int64_t o_end, int64_t y_stride, int64_t y_col0, float* y) {
  constexpr int64_t kBlock = 64;
  RowMatrix wblock(kBlock, in);
  Eigen::Map<const RowMatrix> xm(x, rows, in);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kBlock) {
    const int64_t nb = std::min(kBlock, o_end - o0);
    for (int64_t b = 0; b < nb; ++b) {
      const W* src = w + (o0 + b) * w_stride;
      float* dst = wblock.row(b).data();
      for (int64_t i = 0; i < in; ++i) dst[i] = WeightAt(src, i);
    }
    Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> ym(y + (o0 - y_col0), rows, nb, Eigen::OuterStride<>(y_stride));
    ym.noalias() = xm * wblock.topRows(nb).transpose();
  }
}

constexpr int64_t kManyRowsThreshold = 24;

}  // namespace

void LinearRows(const float* x, int64_t rows, const TensorView& w, int64_t out_begin, int64_t out_end, float* y,
                ThreadPool* pool) {
  MTPSPEC_CHECK(w.ndim == 2);
  MTPSPEC_CHECK(w.stride[1] == 1);
  MTPSPEC_CHECK(out_begin >= 0 && out_end <= w.shape[0] && out_begin <= out_end);
  if (rows == 0 || out_end == out_begin) return;
  const int64_t in = w.shape[1];
  const int64_t w_stride = w.stride[0];
  const int64_t y_stride = out_end - out_begin;
  if (pool == nullptr) pool = &DefaultThreadPool();
  // Enough output rows per task that the per-task overhead stays small against the row work.
  const int64_t min_chunk = std::max<int64_t>(8, 32768 / std::max<int64_t>(in * std::max<int64_t>(rows, 1), 1));
  auto run = [&](int64_t b, int64_t e) {
    const int64_t ob = out_begin + b, oe = out_begin + e;
    if (w.dtype == DType::kBF16) {
      const uint16_t* wp = w.as<uint16_t>();
      if (rows >= kManyRowsThreshold) {
        LinearManyRows(x, rows, wp, w_stride, in, ob, oe, y_stride, out_begin, y);
      } else {
        LinearSmallRows(x, rows, wp, w_stride, in, ob, oe, y_stride, out_begin, y);
      }
    } else {
      MTPSPEC_CHECK(w.dtype == DType::kF32);
      const float* wp = w.as<float>();
      if (rows >= kManyRowsThreshold) {
        LinearManyRows(x, rows, wp, w_stride, in, ob, oe, y_stride, out_begin, y);
      } else {
        LinearSmallRows(x, rows, wp, w_stride, in, ob, oe, y_stride, out_begin, y);
      }
    }
  };
  pool->ParallelFor(out_end - out_begin, min_chunk, run);
}

void Linear(const float* x, int64_t rows, const TensorView& w, float* y, ThreadPool* pool) {
  LinearRows(x, rows, w, 0, w.shape[0], y, pool);
}

float DotF32(const float* a, const float* b, int64_t n) {
  const float* rows[1] = {a};
  float acc;
  DotRows(rows, 1, b, n, &acc);
  return acc;
}

float DotBf16(const float* a, const uint16_t* b, int64_t n) {
  const float* rows[1] = {a};
  float acc;
  DotRows(rows, 1, b, n, &acc);
  return acc;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void RmsNorm(const float* x, const float* weight, int64_t n, double eps, float* out) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + static_cast<float>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, double eps, float* out) {
  float mean = 0.0f;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<float>(n);
  float var = 0.0f;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(var + static_cast<float>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * inv * weight[i] + bias[i];
}

}  // namespace mtpspec
