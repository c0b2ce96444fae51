// FP8 block quantisation as the released GLM-5.x and DeepSeek-V3.2 checkpoints store their matrices
// (docs/models.md, "FP8 checkpoints"): float8_e4m3fn codes with one f32 scale per 128 × 128 block.
// Used to write release-format checkpoints (testing/) and to quantise the matrices a release keeps in
// bf16 when a model is loaded with every matrix in FP8 (WeightDType::kFP8).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mtpspec {

class ThreadPool;

struct Fp8Matrix {
  Tensor codes;   // [out, in] F8_E4M3
  Tensor scales;  // [⌈out/128⌉, ⌈in/128⌉] f32 (the `weight_scale_inv` tensor)
};

// Quantises a 2-D f32, bf16 or f16 matrix w [out, in] (rows contiguous, any row stride): per block,
// scale = max|w| / 448 (1 for an all-zero block; with `power_of_two_scales`, as a `ue8m0` scale
// format demands, the next power of two up), and each weight becomes the e4m3 code nearest
// w / scale, ties to even. Blocks at the edges may be partial. Parallel over bands of 128 rows.
Fp8Matrix QuantiseFp8(const TensorView& w, bool power_of_two_scales, ThreadPool* pool = nullptr);

// Quantises one group x [d] to float8_e4m3fn as DeepSeek-V3.2's reference code quantises activations
// (`act_quant` with power-of-two scales): scale = the smallest power of two ≥ max(max|x|, 1e-4) / 448,
// out[i] = e4m3(x[i] / scale) rounded to nearest even (x[i] / scale is exact, and |x[i] / scale| ≤
// 448). Returns the scale: x[i] ≈ e4m3 value of out[i] · scale. Used by the FP8 indexer (its keys and
// query heads) and the FP8 Linear's fp8 activations (ActivationPrecision::kFp8).
float QuantizeFp8Row(const float* x, int64_t d, uint8_t* out);
// QuantizeFp8Row's scale for a group whose largest magnitude is max_abs (finite, ≥ 0).
float Fp8GroupScale(float max_abs);
// The smallest power of two ≥ v, for finite v > 0 (the `ue8m0` rounding of a scale).
float PowerOfTwoAtLeast(float v);

}  // namespace mtpspec
