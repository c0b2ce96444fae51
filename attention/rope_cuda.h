// RoPE on the GPU, the twin of attention/rope.h.
//
// The host RotaryEmbedding computes cos/sin in double from fp32 angles (pos · θ_i) and multiplies by
// the YaRN attention factor; DeviceRope evaluates exactly those values on the host once, for
// positions [0, max_positions), and keeps them on the device as two tables. A kernel then rotates
// with the table entries, so the GPU rotation matches the CPU's to the last bit of cos/sin (the
// remaining difference is the fp32 multiply-add order, which both sides write as a·c − b·s).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/rope.h"
#include "core/cuda_context.h"

namespace mtpspec::cuda {

class DeviceRope {
 public:
  DeviceRope() = default;
  // Builds the tables for positions [0, max_positions) from the host embedding.
  static absl::StatusOr<DeviceRope> Create(const RotaryEmbedding& host, int64_t max_positions);

  int64_t rotary_dim() const { return rotary_dim_; }
  int64_t max_positions() const { return max_positions_; }
  const float* cos_table() const { return cos_.data(); }  // [max_positions, rotary_dim / 2]
  const float* sin_table() const { return sin_.data(); }  // [max_positions, rotary_dim / 2]

  // Rotates, in place, `count` vectors of x for each of `rows` rows: vector v of row r starts at
  // x + r·row_stride + v·vec_stride + offset and its first rotary_dim values rotate by the angle of
  // position first_position + r (rows are consecutive positions, as in every forward call).
  // Positions at or past max_positions are an error. x: device.
  absl::Status Apply(Context& ctx, float* x, int64_t rows, int64_t count, int64_t row_stride, int64_t vec_stride,
                     int64_t offset, int64_t first_position, RopeStyle style) const;

 private:
  int64_t rotary_dim_ = 0;
  int64_t max_positions_ = 0;
  DeviceArray<float> cos_;  // [max_positions, rotary_dim / 2] cos(p·θ_i)·attention_factor
  DeviceArray<float> sin_;  // [max_positions, rotary_dim / 2] sin(p·θ_i)·attention_factor
};

}  // namespace mtpspec::cuda
