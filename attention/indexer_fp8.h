// The numerics of the FP8 indexer (IndexKeyStorage::kFp8), as DeepSeek-V3.2's reference inference code
// computes its scores: after RoPE, each query head and each key is rotated by the normalised
// Walsh-Hadamard transform, then quantised to float8_e4m3fn with one power-of-two scale per 128
// values (here: per head or key, d_I = 128); a score is Σ_h w_h · q_scale_h · d_I^-½ · ReLU(q8_h · k8),
// times the key's scale. The rotation spreads outliers over the d_I values before the 8-bit rounding;
// being orthogonal, it leaves every exact dot product unchanged.
#pragma once

#include <cstdint>

namespace mtpspec {

// x ← H x / √d in place, H the Sylvester-ordered Hadamard matrix of order d (a power of two): the
// butterfly over strides 1, 2, 4, …, d/2, then the scale. Applying it twice gives x back.
void HadamardRotate(float* x, int64_t d);

// Quantises x [d] to float8_e4m3fn: scale = the smallest power of two ≥ max(max|x|, 1e-4) / 448,
// out[i] = e4m3(x[i] / scale) rounded to nearest even (x[i] / scale is exact, and |x[i] / scale| ≤
// 448). Returns the scale: x[i] ≈ e4m3 value of out[i] · scale.
float QuantizeFp8Row(const float* x, int64_t d, uint8_t* out);

}  // namespace mtpspec
