#include "kernels/linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "Eigen/Core"
#include "core/parallel.h"
#include "core/status.h"
#include "kernels/fp8_pair_tiles.h"
#include "kernels/fp8_pairs.h"
#include "kernels/pair_gemm.h"
#include "kernels/simd_tiles.h"

namespace mtpspec {
namespace {

// Small-row path (decode, short verify chunks): a tile of up to kRowBlock input rows × kWeightBlock
// weight rows is computed at once. Each weight vector is widened once and used for every input
// row, and the kRowBlock·kWeightBlock independent accumulators stay in registers. Decode streams
// each weight once from DRAM, and a matrix is only a few hundred KB per thread, too short for the
// hardware prefetcher to ramp up, so the tile also prefetches the same columns of the rows
// kPrefetchTiles tiles ahead (16 KB ahead for a 1024-wide bf16 matrix). On the bench model this
// took the single-row bf16 GEMV from ~8 to ~12-14 GB/s per core (bench/README.md).
constexpr int kRowBlock = tiles::kMaxTile;
constexpr int kWeightBlock = tiles::kMaxTile;
constexpr int kPrefetchTiles = 2;

// A vector whose data starts on a 64-byte line (Eigen aligns its blocks to that with AVX-512). A
// tile of several rows loads its rows of x again for every 16 weights, and a vector that straddles
// two lines costs two line reads.
#if defined(__AVX512F__)
static_assert(EIGEN_MAX_ALIGN_BYTES >= 64);
#endif
using LineAlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

using tiles::DotTile;

#if defined(__AVX512F__)
using tiles::LoadWeights;

// Σ a[i]·b[i] for one pair of vectors, four accumulators deep (attention's short dot products are
// latency-bound on a single FMA chain otherwise).
template <typename W>
float DotOne(const float* a, const W* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(LoadWeights(b + i), _mm512_loadu_ps(a + i), acc0);
    acc1 = _mm512_fmadd_ps(LoadWeights(b + i + 16), _mm512_loadu_ps(a + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(LoadWeights(b + i + 32), _mm512_loadu_ps(a + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(LoadWeights(b + i + 48), _mm512_loadu_ps(a + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(LoadWeights(b + i), _mm512_loadu_ps(a + i), acc0);
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc1 = _mm512_fmadd_ps(LoadWeights(b + i, mask), _mm512_maskz_loadu_ps(mask, a + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// Widens n weights to f32.
inline void WidenRow(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, LoadWeights(src + i));
  for (; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}
#else
using tiles::WeightAt;

template <typename W>
float DotOne(const float* a, const W* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * WeightAt(b, i);
  return acc;
}

inline void WidenRow(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}
#endif

inline void WidenRow(const float* src, int64_t n, float* dst) { std::copy_n(src, n, dst); }

// The rows of a weight matrix as the tiles read them. Dense f32 or bf16 rows:
template <typename W>
struct DenseRows {
  const W* w;
  int64_t stride;  // elements between rows
  int64_t row_bytes(int64_t in) const { return in * static_cast<int64_t>(sizeof(W)); }
  // Weight rows per tile of NR input rows.
  template <int NR>
  static constexpr int kTileWeights = kWeightBlock;
  // out[r][k] for rows x[0 … NR) and weight rows o … o + NK − 1; prefetches kPrefetchTiles tiles ahead.
  template <int NR, int NK>
  void Dot(const float* const* x, int64_t in, int64_t o, float (*out)[kRowBlock]) const {
    const W* wr[NK];
    uintptr_t ahead[NK];
    for (int k = 0; k < NK; ++k) {
      wr[k] = w + (o + k) * stride;
      ahead[k] = reinterpret_cast<uintptr_t>(wr[k]) + kPrefetchTiles * NK * stride * sizeof(W);
    }
    DotTile<NR, NK>(x, wr, in, ahead, out);
  }
  void Widen(int64_t o, int64_t in, float* dst) const { WidenRow(w + o * stride, in, dst); }
};

// FP8 rows with their 128 × 128 block scales (TensorView::block_scale), widened and scaled in
// registers. With `nan_free` the tiles widen by Fp8Direct and x must hold the rows scaled as
// ScaleRowsForFp8Direct leaves them.
struct Fp8Rows {
  const uint8_t* w;
  int64_t stride;            // bytes between rows
  const float* scale;        // [⌈out/128⌉, ⌈in/128⌉]
  int64_t scale_stride;
  bool nan_free = false;
  int64_t row_bytes(int64_t in) const { return in; }
  // Weight rows per tile of NR input rows. An FP8 tile keeps two accumulators per (row, weight row),
  // the running total and the current block's sum: 4 × 4 would need all 32 vector registers and
  // spill, so 4 input rows take 3 weight rows a tile.
  template <int NR>
  static constexpr int kTileWeights = NR == 4 ? 3 : kWeightBlock;
  const float* ScaleRow(int64_t o) const { return scale + (o / kFp8Block) * scale_stride; }
  template <int NR, int NK>
  void Dot(const float* const* x, int64_t in, int64_t o, float (*out)[kRowBlock]) const {
    const uint8_t* wr[NK];
    const float* sr[NK];
    uintptr_t ahead[NK];
    for (int k = 0; k < NK; ++k) {
      wr[k] = w + (o + k) * stride;
      sr[k] = ScaleRow(o + k);
      ahead[k] = reinterpret_cast<uintptr_t>(wr[k]) + 2 * kPrefetchTiles * NK * stride;  // half the bytes of bf16: twice the tiles
    }
#if defined(MTPSPEC_FP8_SIMD)
    if (nan_free) {
      tiles::DotTileFp8<NR, NK, true>(x, wr, sr, in, ahead, out);
      return;
    }
#endif
    tiles::DotTileFp8<NR, NK>(x, wr, sr, in, ahead, out);
  }
  void Widen(int64_t o, int64_t in, float* dst) const {
    tiles::WidenFp8Row(w + o * stride, ScaleRow(o), in, dst);
  }
};

#if defined(MTPSPEC_FP8_PAIRS_SIMD)
// FP8 rows against input rows taken as bf16 or fp8 codes (kernels/fp8_pairs.h): the pair tiles.
struct Fp8PairRows {
  const uint8_t* w;
  int64_t stride;            // bytes between rows
  const float* scale;        // [⌈out/128⌉, ⌈in/128⌉]
  int64_t scale_stride;
  bool nan_free = false;
  const uint64_t* line_flags = nullptr;  // [out, flag_stride] (TensorView::fp8_line_flags), or null
  int64_t flag_stride = 0;
  int64_t row_bytes(int64_t in) const { return in; }
  // Weight rows per tile of NR input rows: two accumulators per (row, weight row), two line vectors
  // per weight row and two input vectors must fit the 32 registers.
  template <int NR>
  static constexpr int kTileWeights = NR <= 2 ? kWeightBlock : NR == 3 ? 3 : 2;
  template <int NR, int NK>
  void Dot(const uint32_t* const* x, int64_t in, int64_t o, float (*out)[kRowBlock]) const {
    const uint8_t* wr[NK];
    const float* sr[NK];
    const uint64_t* fr[NK];
    uintptr_t ahead[NK];
    for (int k = 0; k < NK; ++k) {
      wr[k] = w + (o + k) * stride;
      sr[k] = scale + ((o + k) / kFp8Block) * scale_stride;
      fr[k] = line_flags == nullptr ? nullptr : line_flags + (o + k) * flag_stride;
      ahead[k] = reinterpret_cast<uintptr_t>(wr[k]) + 2 * kPrefetchTiles * NK * stride;
    }
    const uint64_t* const* fix = line_flags == nullptr ? nullptr : fr;
    if (nan_free) {
      tiles::DotTileFp8Pairs<NR, NK, true>(x, wr, sr, in, fix, ahead, out);
    } else {
      tiles::DotTileFp8Pairs<NR, NK, false>(x, wr, sr, in, fix, ahead, out);
    }
  }
};
#endif

// The input rows as the tiles take them: f32 rows, or prepared codes (kernels/fp8_pairs.h).
struct FloatInput {
  const float* x;  // [rows, in]
  int64_t in;
  using Row = const float*;
  Row RowAt(int64_t r) const { return x + r * in; }
};
struct PairInput {
  const Fp8PairInput* codes;
  using Row = const uint32_t*;
  Row RowAt(int64_t r) const { return codes->Row(r); }
};

#if defined(MTPSPEC_FP8_SIMD)
// The input of the Fp8Direct tiles: scaled[r] = x[r] · 2^112, and unscale[r] = 1, unless row r holds
// a value of magnitude 2^15 or more, whose product with 2^112 could overflow; such a row is scaled by
// 2^(126 − e) instead (e = ⌊log2 max |x[r]|⌋, which keeps every value below 2^127), and its outputs
// are multiplied by unscale[r] = 2^(e − 14) afterwards. Powers of two, so exact but for underflow
// of that row's tiniest products; each row's factor comes from that row alone.
//
// `scaled` starts on a 64-byte line (LineAlignedFloats), and so does each row when `in` is a multiple of 16.
// With the buffer wherever the heap put it, 3- and 4-row FP8 tiles ran at 0.7x in bench/linear_bench,
// from one build or allocation pattern to the next.
void ScaleRowsForFp8Direct(const float* x, int64_t rows, int64_t in, LineAlignedFloats& scaled,
                           std::vector<float>& unscale) {
  scaled.resize(rows * in);  // [rows, in]
  unscale.assign(rows, 1.0f);  // [rows]
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    __m512 peak = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) peak = _mm512_max_ps(peak, _mm512_abs_ps(_mm512_loadu_ps(xr + i)));
    float largest = _mm512_reduce_max_ps(peak);
    for (; i < in; ++i) largest = std::max(largest, std::fabs(xr[i]));
    float factor = tiles::kFp8DirectInputScale;
    if (largest >= 0x1p15f && std::isfinite(largest)) {
      const int e = std::ilogb(largest);
      factor = std::ldexp(1.0f, 126 - e);
      unscale[r] = std::ldexp(1.0f, e - 14);
    }
    const __m512 f = _mm512_set1_ps(factor);
    float* dst = scaled.data() + r * in;
    for (i = 0; i + 16 <= in; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_loadu_ps(xr + i), f));
    for (; i < in; ++i) dst[i] = xr[i] * factor;
  }
}
#endif

// Output rows [o_begin, o_end) for NR input rows starting at row `first` of the input.
template <int NR, typename Input, typename Rows>
void LinearRowGroup(const Input& input, int64_t first, int64_t in, const Rows& w, int64_t o_begin, int64_t o_end,
                    float* y, int64_t y_stride, int64_t y_col0) {
  typename Input::Row xr[NR];
  for (int r = 0; r < NR; ++r) xr[r] = input.RowAt(first + r);
  float out[kRowBlock][kWeightBlock];
  constexpr int kTile = Rows::template kTileWeights<NR>;
  int64_t o = o_begin;
  for (; o + kTile <= o_end; o += kTile) {
    w.template Dot<NR, kTile>(xr, in, o, out);
    for (int r = 0; r < NR; ++r) {
      for (int k = 0; k < kTile; ++k) y[r * y_stride + (o + k - y_col0)] = out[r][k];
    }
  }
  for (; o < o_end; ++o) {
    w.template Dot<NR, 1>(xr, in, o, out);
    for (int r = 0; r < NR; ++r) y[r * y_stride + (o - y_col0)] = out[r][0];
  }
}

template <typename Input, typename Rows>
void LinearRowBlock(const Input& input, int64_t first, int64_t rows, const Rows& w, int64_t in, int64_t o_begin,
                    int64_t o_end, int64_t y_stride, int64_t y_col0, float* y) {
  switch (rows) {
    case 1: LinearRowGroup<1>(input, first, in, w, o_begin, o_end, y, y_stride, y_col0); break;
    case 2: LinearRowGroup<2>(input, first, in, w, o_begin, o_end, y, y_stride, y_col0); break;
    case 3: LinearRowGroup<3>(input, first, in, w, o_begin, o_end, y, y_stride, y_col0); break;
    default: LinearRowGroup<4>(input, first, in, w, o_begin, o_end, y, y_stride, y_col0); break;
  }
}

// Weight bytes per chunk when several row groups share it: the first group streams the chunk from
// memory and the others find it in L2 (2 MiB per core here).
constexpr int64_t kReuseChunkBytes = 256 << 10;

template <typename Input, typename Rows>
void LinearSmallRows(const Input& input, int64_t rows, const Rows& w, int64_t in, int64_t o_begin, int64_t o_end,
                     int64_t y_stride, int64_t y_col0, float* y) {
  if (rows <= kRowBlock) {
    LinearRowBlock(input, 0, rows, w, in, o_begin, o_end, y_stride, y_col0, y);
    return;
  }
  // More than one row group (a verify of k + 1 >= 5 rows): walk the weights once, in chunks, and
  // run every row group over a chunk before the next, so a matrix is read from DRAM once rather
  // than once per group. Only the order of the tiles changes, so every row's result keeps its bits.
  const int64_t row_bytes = std::max<int64_t>(w.row_bytes(in), 1);
  constexpr int64_t kAlign = 12;  // a multiple of every tile's weight rows (3 and 4)
  const int64_t chunk = std::max<int64_t>(kAlign, kReuseChunkBytes / row_bytes / kAlign * kAlign);
  for (int64_t c0 = o_begin; c0 < o_end; c0 += chunk) {
    const int64_t c1 = std::min(c0 + chunk, o_end);
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      LinearRowBlock(input, r0, std::min<int64_t>(kRowBlock, rows - r0), w, in, c0, c1, y_stride, y_col0,
                     y + r0 * y_stride);
    }
  }
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Many rows: widen a block of weight rows to f32 and let Eigen's GEMM do the work.
template <typename Rows>
void LinearManyRows(const float* x, int64_t rows, const Rows& w, int64_t in, int64_t o_begin, int64_t o_end,
                    int64_t y_stride, int64_t y_col0, float* y) {
  constexpr int64_t kBlock = 64;
  RowMatrix wblock(kBlock, in);
  Eigen::Map<const RowMatrix> xm(x, rows, in);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kBlock) {
    const int64_t nb = std::min(kBlock, o_end - o0);
    for (int64_t b = 0; b < nb; ++b) w.Widen(o0 + b, in, wblock.row(b).data());
    Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> ym(y + (o0 - y_col0), rows, nb, Eigen::OuterStride<>(y_stride));
    ym.noalias() = xm * wblock.topRows(nb).transpose();
  }
}

thread_local bool row_invariant = false;  // a RowInvariantScope lives on this thread

// Whether a call of `rows` rows from this thread takes the GEMM path.
bool UseGemm(int64_t rows) { return rows >= kLinearGemmRows && !row_invariant; }

template <typename Rows>
void LinearRangeOf(const float* x, int64_t rows, const Rows& w, int64_t in, int64_t ob, int64_t oe, float* y,
                   int64_t y_stride, int64_t y_col0, bool gemm) {
  // Several rows off a line boundary are copied to one (each row then starts on a line when `in` is
  // a multiple of 16): off a line, a 3-row bf16 tile streamed markedly slower. Only where the range
  // holds 64 weight rows per input row or more, so that the copy costs a few percent of the range's
  // weight bytes at most (a short range resident in L2 ran measurably slower with it).
  if (!gemm && rows > 1 && in % 16 == 0 && oe - ob >= 64 * rows && reinterpret_cast<uintptr_t>(x) % 64 != 0) {
    thread_local LineAlignedFloats aligned;  // [rows, in]
    aligned.assign(x, x + rows * in);
    x = aligned.data();
  }
  if (gemm) {
    LinearManyRows(x, rows, w, in, ob, oe, y_stride, y_col0, y);
  } else {
    LinearSmallRows(FloatInput{x, in}, rows, w, in, ob, oe, y_stride, y_col0, y);
  }
}

// Output rows [ob, oe) of w for all input rows, written to y[r·y_stride + (o − y_col0)], on the
// calling thread. `reduced`: the rows as prepared for an FP8 matrix with reduced activations
// (Fp8ReducedInput: the pair GEMM's tiles, the pair tiles' codes or f32 values), or null.
void LinearRange(const float* x, int64_t rows, const TensorView& w, const Fp8ReducedInput* reduced, int64_t ob,
                 int64_t oe, float* y, int64_t y_stride, int64_t y_col0, bool gemm) {
  const int64_t in = w.shape[1];
  if (reduced != nullptr && reduced->GemmRows() != nullptr) {
    PairGemm(*reduced->GemmRows(), w, ob, oe, y, y_stride, y_col0);
    return;
  }
  const Fp8PairInput* codes = reduced != nullptr ? reduced->PairCodes() : nullptr;
  if (reduced != nullptr) x = reduced->F32Rows(x);
  switch (w.dtype) {
    case DType::kBF16:
      LinearRangeOf(x, rows, DenseRows<uint16_t>{w.as<uint16_t>(), w.stride[0]}, in, ob, oe, y, y_stride, y_col0, gemm);
      break;
    case DType::kF8E4M3: {
#if defined(MTPSPEC_FP8_PAIRS_SIMD)
      if (codes != nullptr) {
        const Fp8PairRows pairs{w.as<uint8_t>(), w.stride[0],      w.block_scale,
                                w.scale_stride,    w.fp8_nan_free, w.fp8_line_flags,
                                w.line_flag_stride};
        LinearSmallRows(PairInput{codes}, rows, pairs, in, ob, oe, y_stride, y_col0, y);
        for (int64_t r = 0; r < rows; ++r) {  // each row's 2^-e (kernels/fp8_pairs.h)
          for (int64_t o = ob; o < oe; ++o) y[r * y_stride + (o - y_col0)] *= codes->unscale[r];
        }
        break;
      }
#endif
      MTPSPEC_CHECK(codes == nullptr);
      Fp8Rows fp8{w.as<uint8_t>(), w.stride[0], w.block_scale, w.scale_stride};
#if defined(MTPSPEC_FP8_SIMD)
      if (w.fp8_nan_free && !gemm) {
        thread_local LineAlignedFloats scaled;    // [rows, in]
        thread_local std::vector<float> unscale;  // [rows]
        ScaleRowsForFp8Direct(x, rows, in, scaled, unscale);
        fp8.nan_free = true;
        LinearSmallRows(FloatInput{scaled.data(), in}, rows, fp8, in, ob, oe, y_stride, y_col0, y);
        for (int64_t r = 0; r < rows; ++r) {
          if (unscale[r] == 1.0f) continue;
          for (int64_t o = ob; o < oe; ++o) y[r * y_stride + (o - y_col0)] *= unscale[r];
        }
        break;
      }
#endif
      LinearRangeOf(x, rows, fp8, in, ob, oe, y, y_stride, y_col0, gemm);
      break;
    }
    default:
      MTPSPEC_CHECK(w.dtype == DType::kF32);
      LinearRangeOf(x, rows, DenseRows<float>{w.as<float>(), w.stride[0]}, in, ob, oe, y, y_stride, y_col0, gemm);
  }
}

// Enough output rows per task that the per-task overhead stays small against the row work.
int64_t MinChunk(int64_t in, int64_t rows) {
  return std::max<int64_t>(8, 32768 / std::max<int64_t>(in * std::max<int64_t>(rows, 1), 1));
}

void CheckWeight(const TensorView& w) {
  MTPSPEC_CHECK(w.ndim == 2);
  MTPSPEC_CHECK(w.stride[1] == 1);
  MTPSPEC_CHECK(w.dtype != DType::kF8E4M3 || w.block_scale != nullptr);
}

}  // namespace

void LinearRows(const float* x, int64_t rows, const TensorView& w, int64_t out_begin, int64_t out_end, float* y,
                ThreadPool* pool) {
  CheckWeight(w);
  MTPSPEC_CHECK(out_begin >= 0 && out_end <= w.shape[0] && out_begin <= out_end);
  if (rows == 0 || out_end == out_begin) return;
  if (pool == nullptr) pool = &DefaultThreadPool();
  const bool gemm = UseGemm(rows);  // decided on the calling thread, where a RowInvariantScope lives
  Fp8ReducedInput reduced;
  const bool reduces = TakesReducedInput(w);
  if (reduces) PrepareReducedInput(x, rows, w, gemm, &reduced, pool);
  pool->ParallelFor(out_end - out_begin, MinChunk(w.shape[1], rows), [&](int64_t b, int64_t e) {
    LinearRange(x, rows, w, reduces ? &reduced : nullptr, out_begin + b, out_begin + e, y, out_end - out_begin,
                out_begin, gemm);
  });
}

void LinearBatch(std::span<const LinearJob> jobs, ThreadPool* pool) {
  std::vector<int64_t> first_row(jobs.size() + 1, 0);  // [jobs + 1] offsets of each job's outputs
  int64_t min_chunk = 8;
  for (size_t j = 0; j < jobs.size(); ++j) {
    CheckWeight(jobs[j].w);
    first_row[j + 1] = first_row[j] + (jobs[j].rows > 0 ? jobs[j].w.shape[0] : 0);
    min_chunk = std::max(min_chunk, MinChunk(jobs[j].w.shape[1], jobs[j].rows));
  }
  if (first_row.back() == 0) return;
  if (pool == nullptr) pool = &DefaultThreadPool();
  std::vector<char> gemm(jobs.size());  // [jobs] decided on the calling thread
  for (size_t j = 0; j < jobs.size(); ++j) gemm[j] = UseGemm(jobs[j].rows);
  // The inputs of the jobs with reduced activations, prepared once for every job that shares them
  // (a MoE expert's gate and up projections read the same rows).
  std::vector<const Fp8ReducedInput*> reduced(jobs.size(), nullptr);  // [jobs]
  std::vector<Fp8ReducedInput> prepared;
  prepared.reserve(jobs.size());  // no reallocation: `reduced` points into it
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    if (job.rows == 0 || !TakesReducedInput(job.w)) continue;
    for (size_t i = 0; i < j && reduced[j] == nullptr; ++i) {
      if (reduced[i] != nullptr && jobs[i].x == job.x && jobs[i].rows == job.rows &&
          jobs[i].w.shape[1] == job.w.shape[1] && jobs[i].w.activations == job.w.activations &&
          jobs[i].w.dtype == job.w.dtype &&
          gemm[i] == gemm[j]) {
        reduced[j] = reduced[i];
      }
    }
    if (reduced[j] == nullptr) {
      PrepareReducedInput(job.x, job.rows, job.w, gemm[j] != 0, &prepared.emplace_back(), pool);
      reduced[j] = &prepared.back();
    }
  }
  pool->ParallelFor(first_row.back(), min_chunk, [&](int64_t b, int64_t e) {
    // Walk the jobs whose output rows overlap [b, e).
    size_t j = std::upper_bound(first_row.begin(), first_row.end(), b) - first_row.begin() - 1;
    for (; j < jobs.size() && first_row[j] < e; ++j) {
      const LinearJob& job = jobs[j];
      const int64_t ob = std::max(b, first_row[j]) - first_row[j];
      const int64_t oe = std::min(e, first_row[j + 1]) - first_row[j];
      if (ob < oe) LinearRange(job.x, job.rows, job.w, reduced[j], ob, oe, job.y, job.w.shape[0], 0, gemm[j] != 0);
    }
  });
}

RowInvariantScope::RowInvariantScope() : previous_(row_invariant) { row_invariant = true; }

RowInvariantScope::~RowInvariantScope() { row_invariant = previous_; }

bool RowInvariantActive() { return row_invariant; }

void Linear(const float* x, int64_t rows, const TensorView& w, float* y, ThreadPool* pool) {
  LinearRows(x, rows, w, 0, w.shape[0], y, pool);
}

void WidenFp8Row(const uint8_t* w, const float* block_scales, int64_t n, float* out) {
  tiles::WidenFp8Row(w, block_scales, n, out);
}

bool Fp8HasNanCode(const TensorView& w) {
  MTPSPEC_CHECK(w.dtype == DType::kF8E4M3 && w.ndim == 2 && w.stride[1] == 1);
  const int64_t cols = w.shape[1];
  for (int64_t row = 0; row < w.shape[0]; ++row) {
    const uint8_t* p = w.as<uint8_t>() + row * w.stride[0];
    int64_t i = 0;
#if defined(MTPSPEC_FP8_SIMD)
    for (; i + 64 <= cols; i += 64) {
      if (tiles::Fp8LineHasNan(p + i)) return true;
    }
#endif
    for (; i < cols; ++i) {
      if ((p[i] & 0x7F) == 0x7F) return true;
    }
  }
  return false;
}

float DotF32(const float* a, const float* b, int64_t n) { return DotOne(a, b, n); }

float DotBf16(const float* a, const uint16_t* b, int64_t n) { return DotOne(a, b, n); }

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void RmsNorm(const float* x, const float* weight, int64_t n, double eps, float* out) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + static_cast<float>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

// Both kernels below call Eigen's packet expf on every element, the tail included (masked lanes).
// An Eigen array expression would not do: over a Map of unknown alignment it computes the elements
// before the first aligned address with std::exp, so a value's bits would depend on its address.
#if defined(__AVX512F__)
// block(i, lanes) for i = 0, 16, 32, … < n; lanes masks the last block to the elements left.
template <typename Block>
void ForEachVector(int64_t n, Block&& block) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) block(i, static_cast<__mmask16>(0xFFFF));
  if (i < n) block(i, static_cast<__mmask16>((1u << (n - i)) - 1u));
}
#endif

void SiluMul(float* gate, const float* up, int64_t n) {
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  ForEachVector(n, [&](int64_t at, __mmask16 lanes) {
    const __m512 g = _mm512_maskz_loadu_ps(lanes, gate + at);
    const __m512 u = _mm512_maskz_loadu_ps(lanes, up + at);
    const __m512 e = Eigen::internal::pexp(_mm512_sub_ps(_mm512_setzero_ps(), g));  // e^−g
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(gate + at, lanes, _mm512_mul_ps(silu, u));
  });
#else
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
#endif
}

bool SoftmaxInPlace(float* s, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (n <= 0) return false;
  Eigen::Map<Eigen::ArrayXf> p(s, n);  // [n]
  const float max_score = p.maxCoeff();
  if (max_score == kNegInf) return false;
#if defined(__AVX512F__)
  const __m512 v_max = _mm512_set1_ps(max_score), v_neg_inf = _mm512_set1_ps(kNegInf);
  __m512 v_sum = _mm512_setzero_ps();
  ForEachVector(n, [&](int64_t at, __mmask16 lanes) {
    const __m512 x = _mm512_maskz_loadu_ps(lanes, s + at);
    const __mmask16 live = lanes & _mm512_cmp_ps_mask(x, v_neg_inf, _CMP_NEQ_OQ);
    const __m512 e = _mm512_maskz_mov_ps(live, Eigen::internal::pexp(_mm512_sub_ps(x, v_max)));
    _mm512_mask_storeu_ps(s + at, lanes, e);
    v_sum = _mm512_add_ps(v_sum, e);
  });
  const float sum = _mm512_reduce_add_ps(v_sum);
#else
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = s[i] == kNegInf ? 0.0f : std::exp(s[i] - max_score);
    sum += s[i];
  }
#endif
  p *= 1.0f / sum;
  return true;
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
