#include "kernels/norm_cuda.h"

#include "kernels/norm_cuda_launch.h"

namespace mtpspec::cuda {

absl::Status RmsNorm(Context& ctx, const float* x, const float* weight, int64_t rows, int64_t n, double eps,
                     float* out) {
  if (rows < 0 || n <= 0) return absl::InvalidArgumentError("cuda::RmsNorm: rows must be ≥ 0 and n > 0");
  return FromCuda(launch::RmsNorm(x, weight, rows, n, static_cast<float>(eps), out, ctx.stream()), "RmsNorm");
}

absl::Status LayerNorm(Context& ctx, const float* x, const float* weight, const float* bias, int64_t rows, int64_t n,
                       double eps, float* out) {
  if (rows < 0 || n <= 0) return absl::InvalidArgumentError("cuda::LayerNorm: rows must be ≥ 0 and n > 0");
  return FromCuda(launch::LayerNorm(x, weight, bias, rows, n, static_cast<float>(eps), out, ctx.stream()),
                  "LayerNorm");
}

absl::Status AddInPlace(Context& ctx, const float* x, int64_t n, float* y) {
  return FromCuda(launch::AddInPlace(x, n, y, ctx.stream()), "AddInPlace");
}

absl::Status SiluMul(Context& ctx, const float* gate_up, int64_t rows, int64_t n, float* out) {
  return FromCuda(launch::SiluMul(gate_up, rows, n, out, ctx.stream()), "SiluMul");
}

}  // namespace mtpspec::cuda
