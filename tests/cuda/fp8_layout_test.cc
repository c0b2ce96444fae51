// The host side of FP8 weights on the GPU (kernels/fp8_device.h, kernels/linear_cuda.h): the
// widening routine the kernels run, checked here on the host against core/dtype.h for every e4m3
// byte, and the device image of a matrix (its bytes and scale grids, alone and stacked) against the
// checkpoint's own dequantisation. None of it needs a GPU, so these tests carry no label.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/fp8_device.h"
#include "kernels/linear_cuda.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec::cuda {
namespace {

using linear_test::MakeWeight;
using linear_test::TestWeight;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Equal bits, or both NaN.
void ExpectSameFloat(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else {
    EXPECT_EQ(Bits(got), Bits(want)) << what << ": got " << got << ", want " << want;
  }
}

TEST(Fp8Device, WidensEveryByteInEveryLaneAsTheHostDequantises) {
  // Scales of the kinds the releases hold, and ones whose products round.
  for (const float scale : {1.0f, 0.5f, 3.0517578125e-05f, 0.0123456f, 1.7e-3f, 2.75e4f}) {
    for (int b = 0; b < 256; ++b) {
      for (int lane = 0; lane < 8; ++lane) {
        // Byte b in `lane`, and in the other lanes neighbours that move with it.
        uint64_t bits = 0;
        uint8_t bytes[8];
        for (int j = 0; j < 8; ++j) {
          bytes[j] = static_cast<uint8_t>(j == lane ? b : (b + 37 * (j + 1)) & 0xFF);
          bits |= static_cast<uint64_t>(bytes[j]) << (8 * j);
        }
        float out[8];
        WidenFp8x8(bits, scale, out);
        for (int j = 0; j < 8; ++j) {
          ExpectSameFloat(out[j], F8E4M3ToF32(bytes[j]) * scale,
                          "byte " + std::to_string(bytes[j]) + " lane " + std::to_string(j) + " scale " +
                              std::to_string(scale));
        }
      }
    }
  }
  // The special codes by name: ±0 keep their sign, the smallest subnormal is 2^-9, both NaN codes.
  float out[8];
  WidenFp8x8(0x7FFF'0180'0100ull, 1.0f, out);  // bytes 00 01 80 01 FF 7F 00 00
  EXPECT_EQ(Bits(out[0]), Bits(0.0f));
  EXPECT_EQ(out[1], 0x1p-9f);
  EXPECT_EQ(Bits(out[2]), Bits(-0.0f));
  EXPECT_EQ(out[3], 0x1p-9f);
  EXPECT_TRUE(std::isnan(out[4]));
  EXPECT_TRUE(std::isnan(out[5]));
}

TEST(Fp8Device, ScaleRowsRestartAtTheSplit) {
  EXPECT_EQ(Fp8ScaleRow(0, 0), 0);
  EXPECT_EQ(Fp8ScaleRow(127, 0), 0);
  EXPECT_EQ(Fp8ScaleRow(128, 0), 1);
  // 200 rows (2 scale rows), then a second matrix whose row 0 is row 200.
  EXPECT_EQ(Fp8ScaleRow(199, 200), 1);
  EXPECT_EQ(Fp8ScaleRow(200, 200), 2);
  EXPECT_EQ(Fp8ScaleRow(327, 200), 2);
  EXPECT_EQ(Fp8ScaleRow(328, 200), 3);
  // A split on a block boundary is the same as no split.
  for (int64_t o = 0; o < 1000; ++o) EXPECT_EQ(Fp8ScaleRow(o, 256), Fp8ScaleRow(o, 0)) << o;
}

// Every weight of an image equals the stored matrix's dequantised value (the f32 product of the
// e4m3 value and its block scale), over partial edge blocks and a row stride wider than the row.
TEST(Fp8Device, ImageHoldsTheStoredMatrix) {
  for (const auto& [out, in, stride] : {std::tuple<int64_t, int64_t, int64_t>{200, 300, 300},
                                        {130, 257, 264}, {1, 5, 5}, {128, 128, 128}, {300, 1031, 1040}}) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, stride, 7 + static_cast<uint32_t>(in));
    auto image = Fp8ImageOf(w.view, "w");
    ASSERT_TRUE(image.ok()) << image.status();
    ASSERT_EQ(image->out, out);
    ASSERT_EQ(image->in, in);
    EXPECT_EQ(image->scale_split, 0);
    EXPECT_EQ(image->scale_cols, (in + 127) / 128);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        ASSERT_EQ(Bits(Fp8ImageWeight(*image, o, i)), Bits(w.values[o * in + i])) << out << "x" << in << " at " << o
                                                                                   << ", " << i;
      }
    }
  }
}

TEST(Fp8Device, StackedImageKeepsEachMatrixsScales) {
  // Gate and up of an MLP whose width (200) is not a multiple of 128: the up rows' scale grid must
  // restart at row 200, not continue the gate's.
  const int64_t width = 200, hidden = 300;
  const TestWeight gate = MakeWeight(DType::kF8E4M3, width, hidden, hidden, 1);
  const TestWeight up = MakeWeight(DType::kF8E4M3, width, hidden, hidden, 2);
  auto image = StackedFp8ImageOf(gate.view, up.view, "mlp");
  ASSERT_TRUE(image.ok()) << image.status();
  ASSERT_EQ(image->out, 2 * width);
  EXPECT_EQ(image->scale_split, width);
  for (int64_t o = 0; o < 2 * width; ++o) {
    const TestWeight& part = o < width ? gate : up;
    const int64_t row = o < width ? o : o - width;
    for (int64_t i = 0; i < hidden; ++i) {
      ASSERT_EQ(Bits(Fp8ImageWeight(*image, o, i)), Bits(part.values[row * hidden + i])) << o << ", " << i;
    }
  }
  DeviceMatrix described;  // the bytes a product reads: 1 per weight plus both scale grids
  described.out = 2 * width;
  described.in = hidden;
  described.fp8 = Fp8Weights{image->bytes.data(), image->scales.data(), image->scale_cols, image->scale_split};
  EXPECT_EQ(described.bytes(), static_cast<size_t>(2 * width * hidden + 2 * 2 * 3 * sizeof(float)));
  EXPECT_EQ(image->scales.size(), static_cast<size_t>(2 * 2 * 3));
}

TEST(Fp8Device, ImagesRefuseWhatIsNotBlockScaledFp8) {
  const TestWeight bf16 = MakeWeight(DType::kBF16, 4, 8, 8, 3);
  auto refused = Fp8ImageOf(bf16.view, "model.layers.0.mlp.down_proj.weight");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("model.layers.0.mlp.down_proj.weight"), std::string::npos);

  TestWeight unscaled = MakeWeight(DType::kF8E4M3, 4, 8, 8, 4);
  unscaled.view.block_scale = nullptr;
  refused = Fp8ImageOf(unscaled.view, "w_unscaled");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("without scales"), std::string::npos);

  const TestWeight a = MakeWeight(DType::kF8E4M3, 4, 8, 8, 5);
  const TestWeight b = MakeWeight(DType::kF8E4M3, 4, 16, 16, 6);
  refused = StackedFp8ImageOf(a.view, b.view, "gate+up");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("gate+up"), std::string::npos);
}

}  // namespace
}  // namespace mtpspec::cuda
