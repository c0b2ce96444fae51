// The input rows of a Linear with FP8 weights taken in bf16 or fp8 (ActivationPrecision::kBf16 and
// kFp8, core/tensor.h), and the arithmetic the kernels then do.
//
// The quantised value q of each element of a row:
//   kFp8:  per group of 128 elements (one per weight block column), s = the smallest power of two
//          ≥ max(max|x|, 1e-4) / 448 and q = e4m3(x / s) · s, rounded to nearest even
//          (QuantizeFp8Row, core/fp8_quantise.h: DeepSeek-V3.2's `act_quant`);
//   kBf16: q = bf16(x), rounded to nearest even.
// A group holding an infinity or a NaN gets NaN values, so its outputs are NaN.
//
// The kernels multiply codes c = q · 2^e, bf16 values, with one power of two per row: e = min(126,
// 99 − ⌊log2 max|x|⌋) (0 for a row of zeros), which keeps every code, product and sum inside f32's
// normal range. A code below 2^-100 in magnitude becomes 0 (its products would fall below the
// normal range, where the BF16 dot product flushes to zero); that drops only values under 2^-199 of
// the row's largest. Each output is multiplied by 2^-e at the end.
//
// The kernels widen each FP8 weight to the bf16 word of its value times 2^-8 (exact: every e4m3
// value, subnormals included, is a bf16 value) and multiply pairs of words, the arithmetic of the
// AVX-512 BF16 dot product (kernels/bf16_pairs.h): per 32-bit lane, the product of the odd elements
// is added to an f32 accumulator and rounded, then that of the even ones. Every product is exact. A
// 128-wide block's lane sums are multiply-added with the weight block's scale times 2^8 into the
// running total (as the f32 tiles do); the 16 lanes are reduced last, then the row's 2^-e applied.
// That order is fixed per output, whatever the number of rows, so a row's result never depends on
// the other rows.
//
// The pairs of a 64-element line are laid out as the kernels widen the weights, not in index order:
// element 16q + t of the line (q < 4, t < 16) is word PairWordOfElement(16q + t) of the line's 64.
#pragma once

#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "core/tensor.h"
#include "kernels/pair_gemm.h"

namespace mtpspec {

class ThreadPool;

inline constexpr int64_t kPairLine = 64;  // elements (and bf16 words) per line of pairs

// The word of a line's 64 that holds element j (< 64) of the line.
inline int64_t PairWordOfElement(int64_t j) {
  const int64_t q = j / 16, t = j % 16;
  return (t < 8 ? 0 : 32) + 8 * q + (t & 7);
}

// Input rows in the kernels' form. Rows are padded with zero codes to a whole number of lines.
struct Fp8PairInput {
  int64_t rows = 0, in = 0;
  int64_t lines = 0;  // ⌈in / 64⌉
  std::vector<uint32_t, Eigen::aligned_allocator<uint32_t>> pairs;  // [rows, lines · 32] bf16 code pairs
  std::vector<float> unscale;                                        // [rows] 2^-e
  const uint32_t* Row(int64_t r) const { return pairs.data() + r * lines * 32; }
  // The bf16 code of element i of row r.
  uint16_t Code(int64_t r, int64_t i) const;
};

// The input of one Linear call whose matrix takes its rows in bf16 or fp8: the rows' codes for the
// pair tiles; on the GEMM path, the same codes transposed for the pair GEMM (kernels/pair_gemm.h); for
// a BF16 matrix below the GEMM path, and in builds without the pair tiles, the codes' values in f32
// for the f32 small-row path. Prepared once
// per call, on the calling thread, before the work is split.
struct Fp8ReducedInput {
  Fp8PairInput codes;
  std::vector<float> values;  // [rows, in] when the f32 paths read them, else empty
  PairGemmInput gemm;         // on the GEMM path, else empty
  // What the f32 paths read in place of the caller's rows x.
  const float* F32Rows(const float* x) const { return values.empty() ? x : values.data(); }
  // What the pair tiles read, or null where another path runs.
  const Fp8PairInput* PairCodes() const {
    return values.empty() && gemm.rows == 0 && codes.rows > 0 ? &codes : nullptr;
  }
  // What the pair GEMM reads, or null where another path runs.
  const PairGemmInput* GemmRows() const { return gemm.rows > 0 ? &gemm : nullptr; }
};

// Whether Linear takes w's input rows reduced: an F8_E4M3 or BF16 matrix whose activations is not f32.
// A BF16 matrix takes the pair GEMM from kLinearGemmRows rows and, below, the f32 small-row path on
// the rows' bf16 values: the same operands at every row count.
inline bool TakesReducedInput(const TensorView& w) {
  return (w.dtype == DType::kF8E4M3 || w.dtype == DType::kBF16) && w.activations != ActivationPrecision::kF32;
}

// Prepares x [rows, w.shape[1]] for w (TakesReducedInput(w)) on the path `gemm` says; rows split over
// `pool` when given (each row is prepared alone, so the result does not depend on it).
void PrepareReducedInput(const float* x, int64_t rows, const TensorView& w, bool gemm, Fp8ReducedInput* out,
                         ThreadPool* pool = nullptr);

// Quantises x [rows, in] (f32, contiguous) as `precision` (kBf16 or kFp8) says, into `out`.
void PrepareFp8PairInput(const float* x, int64_t rows, int64_t in, ActivationPrecision precision, Fp8PairInput* out,
                         ThreadPool* pool = nullptr);

// out [rows, in] = code · 2^-e of every element: q, the values the kernels multiply in place of x
// (exactly, but for the codes set to 0); builds without the pair tiles multiply these in f32 on the
// small-row path.
void DequantiseFp8PairInput(const Fp8PairInput& input, float* out);

// Bit j % 64 of word [o, j / 64]: whether full line j (bytes 64j … 64j + 63) of row o of the F8_E4M3
// matrix w holds a byte whose word the kernels' fast widening gets wrong (exponent field 0, or a NaN
// code), so that they can skip checking every line: [rows, ⌈⌊in / 64⌋ / 64⌉] u64. The last partial
// line is always checked.
Tensor Fp8PairLinesToFix(const TensorView& w);

// The bf16 word the kernels widen an FP8 byte to: the bits of its value times 2^-8 (the NaN codes
// 0x7f and 0xff give NaN).
uint16_t Fp8PairWord(uint8_t byte);

}  // namespace mtpspec
