// Helpers shared by the Linear kernel tests: random inputs, weight matrices in every stored dtype
// with the f32 value of each element, and the float64 reference check.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/linear.h"

namespace mtpspec::linear_test {

// Lengths around the 16-lane vectors and the 64-byte lines, up to a hidden size.
inline const int64_t kInSizes[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 511, 1000, 1024};

inline std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A weight matrix [out, in] with row stride `stride` ≥ in, stored as f32, bf16 or F8_E4M3 with
// 128 × 128 block scales; `values` holds the f32 value of each stored element (bf16-rounded when
// bf16, the f32 product of the FP8 value and its block scale when FP8), row-major [out, in].
struct TestWeight {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> fp8;
  std::vector<float> scales;  // [⌈out/128⌉, ⌈in/128⌉]
  std::vector<float> values;
  TensorView view;
};

// A random FP8 byte that is not a NaN encoding (0x7f, 0xff).
inline uint8_t RandomFp8(std::mt19937& rng) {
  for (;;) {
    const auto b = static_cast<uint8_t>(rng() & 0xFF);
    if ((b & 0x7F) != 0x7F) return b;
  }
}

// The view of FP8 bytes [out, in] (row stride `stride`) with scales [⌈out/128⌉, ⌈in/128⌉].
inline TensorView Fp8View(const uint8_t* bytes, int64_t out, int64_t in, int64_t stride, const float* scales) {
  TensorView v = TensorView::Contiguous(DType::kF8E4M3, const_cast<uint8_t*>(bytes), {out, in});
  v.stride[0] = stride;
  v.block_scale = scales;
  v.scale_stride = (in + kFp8Block - 1) / kFp8Block;
  return v;
}

inline TestWeight MakeWeight(DType dtype, int64_t out, int64_t in, int64_t stride, uint32_t seed) {
  TestWeight w;
  const std::vector<float> raw = RandomFloats(out * stride, seed);
  w.values.resize(out * in);
  if (dtype == DType::kF8E4M3) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    const int64_t scale_cols = (in + kFp8Block - 1) / kFp8Block;
    w.scales.resize(((out + kFp8Block - 1) / kFp8Block) * scale_cols);
    for (float& v : w.scales) v = scale(rng);
    w.fp8.resize(out * stride);
    for (uint8_t& b : w.fp8) b = RandomFp8(rng);
    w.view = Fp8View(w.fp8.data(), out, in, stride, w.scales.data());
    w.view.fp8_nan_free = !Fp8HasNanCode(w.view);  // as the loader marks it: true, no NaN codes above
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        w.values[o * in + i] = F8E4M3ToF32(w.fp8[o * stride + i]) * w.scales[(o / kFp8Block) * scale_cols + i / kFp8Block];
      }
    }
    return w;
  }
  if (dtype == DType::kBF16) {
    w.bf16.resize(out * stride);
    for (int64_t i = 0; i < out * stride; ++i) w.bf16[i] = F32ToBf16(raw[i]);
    w.view = TensorView::Contiguous(DType::kBF16, w.bf16.data(), {out, in});
  } else {
    w.f32 = raw;
    w.view = TensorView::Contiguous(DType::kF32, w.f32.data(), {out, in});
  }
  w.view.stride[0] = stride;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      w.values[o * in + i] = dtype == DType::kBF16 ? Bf16ToF32(w.bf16[o * stride + i]) : raw[o * stride + i];
    }
  }
  return w;
}

// Checks y[rows, out] against Σ x·w in double, within the worst-case f32 summation bound
// (in + 16)·2⁻²⁴·Σ|x·w| (a sequential sum of `in` terms plus a 16-lane reduction); NaN where the
// sum is NaN.
inline void ExpectNearReference(const std::vector<float>& x, const std::vector<float>& w_values, int64_t rows,
                         int64_t in, int64_t out, const float* y, const char* what) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double term = static_cast<double>(x[r * in + i]) * w_values[o * in + i];
        exact += term;
        magnitude += std::fabs(term);
      }
      if (std::isnan(exact)) {  // a NaN weight or input: NaN
        ASSERT_TRUE(std::isnan(y[r * out + o])) << what << " row " << r << ", out " << o << ", in " << in;
        continue;
      }
      ASSERT_NEAR(y[r * out + o], exact, (in + 16) * 0x1p-24 * magnitude + 1e-30)
          << what << " row " << r << " of " << rows << ", out " << o << ", in " << in;
    }
  }
}

}  // namespace mtpspec::linear_test
