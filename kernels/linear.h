// Dense kernels used by every layer: matrix-times-rows with f32, bf16 or FP8 weights, dot products,
// RMSNorm, SiLU, softmax. Weights are read in place (from the checkpoint's bytes) and never
// converted in the hot loop's memory traffic: bf16 and FP8 rows are widened in registers. FP8 sums
// each 128-wide block in f32 and multiplies the sum by the block's scale (TensorView::block_scale)
// on the small-row path; the GEMM path widens a block of rows to W8 · scale first (f32 input rows) or
// multiplies bf16 pairs (input rows in bf16 or fp8: kernels/pair_gemm.h).
//
// Convention: a weight W has shape [out, in] (PyTorch nn.Linear layout). Linear computes
//   y[r, o] = Σ_i x[r, i] · W[o, i]      i.e. y = x · Wᵀ,
// with x: [rows, in] f32 contiguous and y: [rows, out] f32 contiguous.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace mtpspec {

class ThreadPool;

// y[rows, out] = x[rows, in] · w[out, in]ᵀ. `w` is f32, bf16 or F8_E4M3 with its block scales, 2-D,
// rows contiguous (row stride may exceed `in`). Parallel over output rows on `pool`
// (DefaultThreadPool() when null). Below 24 rows every output is accumulated in one fixed order,
// so a row's result does not depend on the other rows of the call.
void Linear(const float* x, int64_t rows, const TensorView& w, float* y, ThreadPool* pool = nullptr);

// Same, restricted to output rows [out_begin, out_end) of w; y has out_end - out_begin columns.
void LinearRows(const float* x, int64_t rows, const TensorView& w, int64_t out_begin, int64_t out_end,
                float* y, ThreadPool* pool = nullptr);

// One matrix product of a LinearBatch: y[rows, w.shape[0]] = x[rows, w.shape[1]] · wᵀ.
struct LinearJob {
  const float* x = nullptr;  // [rows, in]
  int64_t rows = 0;
  TensorView w;              // [out, in] f32, bf16 or F8_E4M3
  float* y = nullptr;        // [rows, out]
};

// Runs every job in one parallel region: the output rows of all jobs are split across the pool
// together, so a group of small matrices (a MoE layer's experts) costs one pool synchronisation
// instead of one per matrix. Each result is what Linear would give for the same job when
// rows < 24 (bitwise); with more rows the tiling follows the split, as in Linear.
void LinearBatch(std::span<const LinearJob> jobs, ThreadPool* pool = nullptr);

// Calls of fewer rows than this stay on the small-row tiles even without a RowInvariantScope, so
// such a call gives every row the bits it gets in any row-invariant call.
inline constexpr int64_t kLinearGemmRows = 24;

// While one lives on a thread, Linear, LinearRows and LinearBatch called from that thread keep every
// row's result independent of the other rows of the call whatever their number: they stay on the
// small-row tiles (each weight chunk streamed once for all row groups) instead of the GEMM path they
// take from 24 rows. A batched verify of several requests, tens of rows in all, so gives each
// request the bits it would get alone. Scopes nest; not shared across threads.
class RowInvariantScope {
 public:
  RowInvariantScope();
  ~RowInvariantScope();
  RowInvariantScope(const RowInvariantScope&) = delete;
  RowInvariantScope& operator=(const RowInvariantScope&) = delete;

 private:
  bool previous_;
};
// Whether a RowInvariantScope lives on the calling thread.
bool RowInvariantActive();

// out[i] = fp8(w[i]) · block_scales[i / 128] for i < n: one row of an FP8 matrix widened to f32,
// with the products the Linear kernels form (F8E4M3ToF32(w[i]) · scale, bit for bit; NaN bytes give
// NaN). block_scales is that row's scale row, [⌈n/128⌉].
void WidenFp8Row(const uint8_t* w, const float* block_scales, int64_t n, float* out);

// Whether any byte of the F8_E4M3 matrix w (2-D, rows contiguous, row stride may exceed its width)
// is a NaN encoding, 0x7f or 0xff. The bytes between rows are not read.
bool Fp8HasNanCode(const TensorView& w);

// Σ a[i]·b[i] in fp32.
float DotF32(const float* a, const float* b, int64_t n);
// Σ a[i]·bf16(b[i]) in fp32.
float DotBf16(const float* a, const uint16_t* b, int64_t n);
// y[i] += alpha · x[i]
void Axpy(float alpha, const float* x, float* y, int64_t n);

// out = w ⊙ x / sqrt(mean(x²) + eps), statistics in fp32; out may alias x.
// Rounding follows transformers: normalize, then multiply by the weight.
void RmsNorm(const float* x, const float* weight, int64_t n, double eps, float* out);
// LayerNorm with weight and bias (biased variance), fp32.
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, double eps, float* out);

// gate[i] = silu(gate[i]) · up[i] for i < n (the SwiGLU combine), silu(v) = v / (1 + e^−v).
// Vectorised with Eigen's expf (within a few ulp of std::exp); element-wise, so a row's result
// never depends on the other rows.
void SiluMul(float* gate, const float* up, int64_t n);

// In-place softmax over n scores: p[i] = e^(s[i] − max) / Σ e^(s[j] − max). A −∞ score gets exactly
// 0, so dropping a key and masking it with −∞ give the same weights. Returns false, leaving s as it
// was, when n = 0 or every score is −∞. The exponentials are Eigen's vectorised expf; the sum runs
// in 16 lanes, then the tail, then one reduction: a fixed order for a given n.
bool SoftmaxInPlace(float* s, int64_t n);

}  // namespace mtpspec
