#include "kernels/row_kernels.h"

#include <algorithm>

#include "kernels/simd_tiles.h"

namespace mtpspec {
namespace {

using tiles::DotTile;
using tiles::kMaxTile;

// Weight rows are prefetched this many tiles (of kMaxTile rows) ahead of the one in use.
constexpr int64_t kPrefetchTiles = 2;

// w[o] for o < count are used; w[o] for o < prefetch_limit may be prefetched (0: no prefetch).
template <int NR, typename Row>
void DotRowGroup(const float* const* xr, const Row* w, int64_t count, int64_t n, float* const* yr,
                 bool accumulate, int64_t prefetch_limit) {
  float out[kMaxTile][kMaxTile];
  uintptr_t ahead[kMaxTile];
  auto store = [&](int64_t o, int nk) {
    for (int r = 0; r < NR; ++r) {
      for (int k = 0; k < nk; ++k) yr[r][o + k] = accumulate ? yr[r][o + k] + out[r][k] : out[r][k];
    }
  };
  int64_t o = 0;
  for (; o + kMaxTile <= count; o += kMaxTile) {
    const uintptr_t* pf = nullptr;
    if (o + (kPrefetchTiles + 1) * kMaxTile <= prefetch_limit) {
      for (int k = 0; k < kMaxTile; ++k) ahead[k] = tiles::RowAddress(w[o + kPrefetchTiles * kMaxTile + k], 0);
      pf = ahead;
    }
    DotTile<NR, kMaxTile>(xr, w + o, n, pf, out);
    store(o, kMaxTile);
  }
  for (; o < count; ++o) {
    DotTile<NR, 1>(xr, w + o, n, nullptr, out);
    store(o, 1);
  }
}

template <typename Row>
void DotRowsImpl(const float* x, int64_t rows, int64_t x_stride, const Row* w, int64_t count, int64_t n,
                 float* y, int64_t y_stride, bool accumulate) {
  // Weight tiles outermost, so a block of weight rows is read once from memory and then reused
  // from L1 by every row group; only the first row group issues prefetches.
  constexpr int64_t kWeightRowsPerPass = 64;
  for (int64_t o0 = 0; o0 < count; o0 += kWeightRowsPerPass) {
    const int64_t nw = std::min(kWeightRowsPerPass, count - o0);
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxTile) {
      const float* xr[kMaxTile];
      float* yr[kMaxTile];
      const int64_t nr = std::min<int64_t>(kMaxTile, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        xr[r] = x + (r0 + r) * x_stride;
        yr[r] = y + (r0 + r) * y_stride + o0;
      }
      const int64_t prefetch_limit = r0 == 0 ? count - o0 : 0;
      switch (nr) {
        case 1: DotRowGroup<1>(xr, w + o0, nw, n, yr, accumulate, prefetch_limit); break;
        case 2: DotRowGroup<2>(xr, w + o0, nw, n, yr, accumulate, prefetch_limit); break;
        case 3: DotRowGroup<3>(xr, w + o0, nw, n, yr, accumulate, prefetch_limit); break;
        default: DotRowGroup<4>(xr, w + o0, nw, n, yr, accumulate, prefetch_limit); break;
      }
    }
  }
}

#if defined(__AVX512F__)
using tiles::CombineTile;

// Rows of w this far ahead are prefetched while one is being combined.
constexpr int64_t kCombinePrefetchRows = 4;

// NR output rows over all `width` columns, in column blocks of up to NV vectors (16 columns each).
template <int NR, int NV, typename Row>
void CombineRowGroup(const float* const* xr, const Row* w, int64_t n, int64_t width, bool accumulate,
                     float* const* yr) {
  constexpr int64_t kBlock = NV * 16;
  int64_t c0 = 0;
  for (; c0 + kBlock <= width; c0 += kBlock) {
    CombineTile<NR, NV>(xr, w, n, c0, static_cast<__mmask16>(0xFFFF), kCombinePrefetchRows, accumulate, yr);
  }
  // The remainder, one vector at a time (the last one masked).
  for (; c0 < width; c0 += 16) {
    const int64_t left = std::min<int64_t>(16, width - c0);
    const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
    CombineTile<NR, 1>(xr, w, n, c0, mask, kCombinePrefetchRows, accumulate, yr);
  }
}

// Rows of w combined per pass. Every row group and column block reads a pass's rows before the next
// pass starts, so they stay in L2 (128 rows of attention's 512-wide latents are 256 KiB) and rows
// gathered from a large cache come from memory once, not once per row group and column block.
// Each output carries its partial sum from pass to pass through y, in k order: the same bits.
constexpr int64_t kCombineRowsPerPass = 128;

template <typename Row>
void CombineRowsImpl(const float* x, int64_t rows, int64_t x_stride, const Row* w, int64_t n, int64_t width,
                     float* y, int64_t y_stride) {
  // Accumulator budget 16 registers: one row spans 16 vectors (256 columns) per pass over w,
  // two rows 8, four rows 4. FP8 rows are widened into registers of their own, not read by the
  // multiply-adds from memory, and take a block's scale: one row spans 8 vectors, one block (16
  // accumulators and 16 widened vectors spilled).
  constexpr int kOneRowVectors = tiles::kBlockScaled<Row> ? 8 : 16;
  for (int64_t k0 = 0; k0 < n || k0 == 0; k0 += kCombineRowsPerPass) {
    const int64_t nk = std::min(kCombineRowsPerPass, n - k0);
    const bool accumulate = k0 > 0;
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxTile) {
      const float* xr[kMaxTile];
      float* yr[kMaxTile];
      const int64_t nr = std::min<int64_t>(kMaxTile, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        xr[r] = x + (r0 + r) * x_stride + k0;
        yr[r] = y + (r0 + r) * y_stride;
      }
      switch (nr) {
        case 1: CombineRowGroup<1, kOneRowVectors>(xr, w + k0, nk, width, accumulate, yr); break;
        case 2: CombineRowGroup<2, 8>(xr, w + k0, nk, width, accumulate, yr); break;
        case 3: CombineRowGroup<3, 4>(xr, w + k0, nk, width, accumulate, yr); break;
        default: CombineRowGroup<4, 4>(xr, w + k0, nk, width, accumulate, yr); break;
      }
    }
  }
}
#else
template <typename Row>
void CombineRowsImpl(const float* x, int64_t rows, int64_t x_stride, const Row* w, int64_t n, int64_t width,
                     float* y, int64_t y_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * y_stride;
    std::fill(yr, yr + width, 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      const float a = x[r * x_stride + k];
      for (int64_t c = 0; c < width; ++c) yr[c] += a * tiles::WeightAt(w[k], c);
    }
  }
}
#endif

}  // namespace

void DotRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate) {
  DotRowsImpl(x, rows, x_stride, w, count, n, y, y_stride, accumulate);
}

void DotRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate) {
  DotRowsImpl(x, rows, x_stride, w, count, n, y, y_stride, accumulate);
}

void CombineRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t n, int64_t width,
                 float* y, int64_t y_stride) {
  CombineRowsImpl(x, rows, x_stride, w, n, width, y, y_stride);
}

void CombineRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t n,
                 int64_t width, float* y, int64_t y_stride) {
  CombineRowsImpl(x, rows, x_stride, w, n, width, y, y_stride);
}

void DotRows(const float* x, int64_t rows, int64_t x_stride, const Fp8ScaledRow* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate) {
  DotRowsImpl(x, rows, x_stride, w, count, n, y, y_stride, accumulate);
}

void CombineRows(const float* x, int64_t rows, int64_t x_stride, const Fp8ScaledRow* w, int64_t n, int64_t width,
                 float* y, int64_t y_stride) {
  CombineRowsImpl(x, rows, x_stride, w, n, width, y, y_stride);
}

}  // namespace mtpspec
