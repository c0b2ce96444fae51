#include "attention/rope_cuda.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/rope_cuda_launch.h"

namespace mtpspec::cuda {

absl::StatusOr<DeviceRope> DeviceRope::Create(const RotaryEmbedding& host, int64_t max_positions) {
  const int64_t dim = host.rotary_dim();
  if (dim <= 0 || dim % 2 != 0 || max_positions <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceRope: need an even rotary_dim > 0 and max_positions > 0, got ",
                                                   dim, " and ", max_positions));
  }
  const int64_t half = dim / 2;
  // The exact values RotaryEmbedding::Apply uses: fp32 angle, cos/sin in double, rounded to fp32,
  // times the attention factor in fp32.
  std::vector<float> cos_host(static_cast<size_t>(max_positions * half));  // [max_positions, half]
  std::vector<float> sin_host(static_cast<size_t>(max_positions * half));  // [max_positions, half]
  const float factor = host.attention_factor();
  for (int64_t p = 0; p < max_positions; ++p) {
    const float pos = static_cast<float>(p);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * host.inv_freq()[i];
      cos_host[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * factor;
      sin_host[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * factor;
    }
  }
  DeviceRope rope;
  rope.rotary_dim_ = dim;
  rope.max_positions_ = max_positions;
  ASSIGN_OR_RETURN(rope.cos_, DeviceArray<float>::Create(max_positions * half, "DeviceRope cos table"));
  ASSIGN_OR_RETURN(rope.sin_, DeviceArray<float>::Create(max_positions * half, "DeviceRope sin table"));
  RETURN_IF_ERROR(FromCuda(cudaMemcpy(rope.cos_.data(), cos_host.data(), rope.cos_.bytes(), cudaMemcpyHostToDevice),
                           "DeviceRope cos upload"));
  RETURN_IF_ERROR(FromCuda(cudaMemcpy(rope.sin_.data(), sin_host.data(), rope.sin_.bytes(), cudaMemcpyHostToDevice),
                           "DeviceRope sin upload"));
  return rope;
}

absl::Status DeviceRope::Apply(Context& ctx, float* x, int64_t rows, int64_t count, int64_t row_stride,
                               int64_t vec_stride, int64_t offset, int64_t first_position, RopeStyle style) const {
  if (rows < 0 || count < 0 || first_position < 0) {
    return absl::InvalidArgumentError("DeviceRope::Apply: negative rows, count or position");
  }
  if (rows == 0 || count == 0) return absl::OkStatus();
  if (first_position + rows > max_positions_) {
    return absl::OutOfRangeError(absl::StrCat("DeviceRope::Apply: positions up to ", first_position + rows - 1,
                                              " but the tables cover [0, ", max_positions_, ")"));
  }
  return FromCuda(launch::RopeApply(x + offset, rows, count, row_stride, vec_stride, rotary_dim_ / 2, cos_.data(),
                                    sin_.data(), first_position, style == RopeStyle::kInterleaved, ctx.stream()),
                  "RopeApply");
}

}  // namespace mtpspec::cuda
