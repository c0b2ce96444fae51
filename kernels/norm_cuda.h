// Row-wise norms and element-wise helpers on the GPU, twins of kernels/linear.h's RmsNorm/LayerNorm.
// One block per row; every row is reduced in one fixed order whatever the row count.
// All pointers are device pointers; out may alias x.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/cuda_context.h"

namespace mtpspec::cuda {

// out[r] = weight ⊙ x[r] / sqrt(mean(x[r]²) + eps). x, out: [rows, n]; weight: [n] f32.
absl::Status RmsNorm(Context& ctx, const float* x, const float* weight, int64_t rows, int64_t n, double eps,
                     float* out);
// LayerNorm with weight and bias (biased variance). x, out: [rows, n]; weight, bias: [n].
absl::Status LayerNorm(Context& ctx, const float* x, const float* weight, const float* bias, int64_t rows, int64_t n,
                       double eps, float* out);
// y[i] += x[i], i < n.
absl::Status AddInPlace(Context& ctx, const float* x, int64_t n, float* y);
// SwiGLU: out[r, i] = silu(gate_up[r, i]) · gate_up[r, n + i]. gate_up: [rows, 2n]; out: [rows, n].
absl::Status SiluMul(Context& ctx, const float* gate_up, int64_t rows, int64_t n, float* out);

}  // namespace mtpspec::cuda
