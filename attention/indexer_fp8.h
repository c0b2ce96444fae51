// The numerics of the FP8 indexer (IndexKeyStorage::kFp8), as DeepSeek-V3.2's reference inference code
// computes its scores: after RoPE, each query head and each key is rotated by the normalised
// Walsh-Hadamard transform, then quantised to float8_e4m3fn with one power-of-two scale per 128
// values (here: per head or key, d_I = 128); a score is Σ_h w_h · q_scale_h · d_I^-½ · ReLU(q8_h · k8),
// times the key's scale. The rotation spreads outliers over the d_I values before the 8-bit rounding;
// being orthogonal, it leaves every exact dot product unchanged.
#pragma once

#include <cstdint>

#include "core/fp8_quantise.h"

namespace mtpspec {

// x ← H x / √d in place, H the Sylvester-ordered Hadamard matrix of order d (a power of two): the
// butterfly over strides 1, 2, 4, …, d/2, then the scale. Applying it twice gives x back.
void HadamardRotate(float* x, int64_t d);

// The quantisation of each rotated head or key is QuantizeFp8Row (core/fp8_quantise.h).

}  // namespace mtpspec
