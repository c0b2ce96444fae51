// FP8 block quantisation against a float64 oracle: each block's scale is its max |w| / 448, and each
// code is the e4m3 value nearest w / scale (found by trying every finite code), ties to the even code.
#include "core/fp8_quantise.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

// The finite e4m3 code nearest v in double (ties to the even code; beyond ±448 the largest code).
uint8_t NearestCode(double v) {
  uint8_t best = 0;
  double best_gap = INFINITY;
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN encodings
    const double gap = std::fabs(static_cast<double>(F8E4M3ToF32(static_cast<uint8_t>(code))) - v);
    const bool tie = gap == best_gap;
    if (gap < best_gap || (tie && (code & 1) == 0 && (best & 1) == 1)) {
      best = static_cast<uint8_t>(code);
      best_gap = gap;
    }
  }
  // ±0: the sign follows v, as the encoder's does.
  if (F8E4M3ToF32(best) == 0.0f) best = std::signbit(v) ? 0x80 : 0x00;
  return best;
}

struct Case {
  DType dtype;
  int64_t out, in, stride;
};

TEST(QuantiseFp8Test, ScalesAreBlockMaxOver448AndCodesAreNearest) {
  // Partial edge blocks in both directions, a row stride beyond the row, f32, bf16 and f16 input.
  const Case cases[] = {{DType::kF32, 130, 300, 300}, {DType::kBF16, 129, 257, 260}, {DType::kF16, 5, 128, 131}};
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    Tensor w = Tensor::Empty(c.dtype, {c.out, c.stride});
    std::vector<float> values(c.out * c.in);  // [out, in] the stored values, widened exactly
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (int64_t r = 0; r < c.out; ++r) {
      for (int64_t i = 0; i < c.stride; ++i) {
        float v = normal(rng) * (r < 128 && i < 128 ? 1.0f : 30.0f);  // blocks of different ranges
        if (r == 3 && i < 128) v = 0.0f;                              // a row of zeros
        const int64_t at = r * c.stride + i;
        if (c.dtype == DType::kF32) {
          w.data<float>()[at] = v;
        } else if (c.dtype == DType::kBF16) {
          w.data<uint16_t>()[at] = F32ToBf16(v);
          v = Bf16ToF32(w.data<uint16_t>()[at]);
        } else {
          w.data<uint16_t>()[at] = F32ToF16(v);
          v = F16ToF32(w.data<uint16_t>()[at]);
        }
        if (i < c.in) values[r * c.in + i] = v;
      }
    }
    TensorView view = w.view();
    view.shape[1] = c.in;  // [out, in] with row stride c.stride
    const Fp8Matrix q = QuantiseFp8(view, /*power_of_two_scales=*/false);
    const int64_t cols = (c.in + 127) / 128;
    ASSERT_EQ(q.scales.dim(0), (c.out + 127) / 128);
    ASSERT_EQ(q.scales.dim(1), cols);
    for (int64_t br = 0; br < q.scales.dim(0); ++br) {
      for (int64_t bc = 0; bc < cols; ++bc) {
        double amax = 0;
        for (int64_t r = br * 128; r < std::min<int64_t>(c.out, br * 128 + 128); ++r) {
          for (int64_t i = bc * 128; i < std::min<int64_t>(c.in, bc * 128 + 128); ++i) {
            amax = std::max(amax, std::fabs(static_cast<double>(values[r * c.in + i])));
          }
        }
        const float scale = q.scales.data<float>()[br * cols + bc];
        EXPECT_EQ(scale, static_cast<float>(amax / 448.0)) << "block " << br << ", " << bc;
        for (int64_t r = br * 128; r < std::min<int64_t>(c.out, br * 128 + 128); ++r) {
          for (int64_t i = bc * 128; i < std::min<int64_t>(c.in, bc * 128 + 128); ++i) {
            const float v = values[r * c.in + i];
            const uint8_t code = q.codes.data<uint8_t>()[r * c.in + i];
            ASSERT_EQ(code, NearestCode(static_cast<double>(static_cast<float>(v / scale))))
                << DTypeName(c.dtype) << " at (" << r << ", " << i << ") value " << v;
            if (std::fabs(v) == amax && amax > 0) {
              EXPECT_EQ(code & 0x7f, 0x7e) << "the block's largest weight is ±448";
            }
          }
        }
      }
    }
  }
}

TEST(QuantiseFp8Test, PowerOfTwoScalesRoundUpAndAZeroBlockScalesByOne) {
  Tensor w = Tensor::Zeros(DType::kF32, {2, 256});
  for (int64_t i = 0; i < 128; ++i) w.data<float>()[i] = 0.001f * static_cast<float>(i % 7) - 0.003f;
  const Fp8Matrix q = QuantiseFp8(w.view(), /*power_of_two_scales=*/true);
  const float scale = q.scales.data<float>()[0];
  int exponent = 0;
  EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << "a power of two";
  EXPECT_GE(scale, 0.003f / 448.0f);
  EXPECT_LT(scale, 2 * 0.003f / 448.0f);
  EXPECT_EQ(q.scales.data<float>()[1], 1.0f) << "an all-zero block";
  for (int64_t i = 128; i < 256; ++i) EXPECT_EQ(q.codes.data<uint8_t>()[i], 0);
}

}  // namespace
}  // namespace mtpspec
