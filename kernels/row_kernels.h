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

// y[r·y_stride + o] = Σ_{i<n} x[r·x_stride + i] · w[o][i]    for r < rows, o < count,
// or += when `accumulate`. w[o] are f32 rows, or bf16 rows (uint16_t bits) in the overload.
void DotRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate = false);
void DotRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t count, int64_t n,
             float* y, int64_t y_stride, bool accumulate = false);

// y[r·y_stride + c] = Σ_{k<n} x[r·x_stride + k] · w[k][c]    for r < rows, c < width:
// each output row is a combination of the rows w[0..n), summed in k order.
void CombineRows(const float* x, int64_t rows, int64_t x_stride, const float* const* w, int64_t n, int64_t width,
                 float* y, int64_t y_stride);
void CombineRows(const float* x, int64_t rows, int64_t x_stride, const uint16_t* const* w, int64_t n,
                 int64_t width, float* y, int64_t y_stride);

}  // namespace mtpspec
