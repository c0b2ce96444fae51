// Small matrix products on the calling thread, for callers that split the work themselves
// (attention splits by head, the indexer by key range). The "weight" rows are given by pointer, so
// they may be scattered (the cache slots a query selected) or a slice of a matrix.
//
// Every output element accumulates in one fixed order whatever the number of rows, the tiling or
// the caller's split, so a query row's result never depends on the other rows of a call: decode,
// verify and chunked prefill give bit-identical rows (ARCHITECTURE.md, "Speculative decoding").
#pragma once

#include <cstdint>

namespace mtpspec {

// One row of an F8_E4M3 matrix with 128 × 128 block scales: its bytes, and the scale row of its block
// row (one f32 per 128 columns). The row kernels read element i as fp8(bytes[i]) · scale[i / 128],
// the product the loader's widening forms (WidenFp8Row), so FP8 rows give, bit for bit, what the
// same rows widened to f32 give.
struct Fp8ScaledRow {
  const uint8_t* bytes = nullptr;
  const float* scale = nullptr;
};

// y[r·y_stride + o] = Σ_{i<n} x[r·x_stride + i] · w[o][i]    for r < rows, o < count,
// or += when `accumulate`. w[o] are f32 rows, or bf16 rows (uint16_t bits) or FP8 rows in the overloads.
void DotRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate = false);
void DotRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate = false);
void DotRows(const float* x, int64_t rows, int64_t x_stride, const Fp8ScaledRow* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate = false);

// y[r·y_stride + c] = Σ_{k<n} x[r·x_stride + k] · w[k][c]    for r < rows, c < width:
// each output row is a combination of the rows w[0..n), summed in k order.
void CombineRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t n, int64_t width,
                 float* y, int64_t y_stride);
void CombineRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t n,
                 int64_t width, float* y, int64_t y_stride);
void CombineRows(const float* x, int64_t rows, int64_t x_stride, const Fp8ScaledRow* w, int64_t n, int64_t width,
                 float* y, int64_t y_stride);

}  // namespace mtpspec
