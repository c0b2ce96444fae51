// kernels/linear_cuda and kernels/norm_cuda against the CPU kernels and a double-precision reference.
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/linear.h"
#include "kernels/linear_cuda.h"
#include "kernels/norm_cuda.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// A bf16 weight [out, in] as host bits, with its f32 value for the reference.
struct HostWeight {
  std::vector<uint16_t> bits;  // [out, in]
  int64_t out, in;
  float at(int64_t o, int64_t i) const { return Bf16ToF32(bits[o * in + i]); }
};

HostWeight RandomWeight(int64_t out, int64_t in, uint32_t seed) {
  const std::vector<float> values = RandomVector(out * in, seed, 0.05f);
  HostWeight w{std::vector<uint16_t>(values.size()), out, in};
  for (size_t i = 0; i < values.size(); ++i) w.bits[i] = F32ToBf16(values[i]);
  return w;
}

TEST(LinearCuda, SmallRowsMatchDoubleReferenceAndAreRowCountInvariant) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const int64_t in : {1, 7, 64, 250, 1024, 1031}) {
    const int64_t out = 37;
    const HostWeight w = RandomWeight(out, in, 11 + static_cast<uint32_t>(in));
    WeightArena arena;
    auto dw = arena.UploadMatrix(TensorView::Contiguous(DType::kBF16, const_cast<uint16_t*>(w.bits.data()), {out, in}),
                                 "w");
    ASSERT_TRUE(dw.ok()) << dw.status();
    const std::vector<float> x = RandomVector(kMaxGemvRows * in, 5);  // [16, in]
    DeviceArray<float> dx = ToDevice(x, **ctx);
    std::vector<float> row0_alone;  // y[0, :] computed in a 1-row call
    for (int64_t rows = 1; rows <= kMaxGemvRows; ++rows) {
      auto dy = DeviceArray<float>::Create(rows * out, "y");
      ASSERT_TRUE(dy.ok());
      ASSERT_TRUE(Linear(**ctx, dx.data(), rows, *dw, dy->data()).ok());
      const std::vector<float> y = ToHost(*dy, **ctx);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double ref = 0, mag = 0;
          for (int64_t i = 0; i < in; ++i) {
            ref += static_cast<double>(x[r * in + i]) * w.at(o, i);
            mag += std::fabs(static_cast<double>(x[r * in + i]) * w.at(o, i));
          }
          EXPECT_NEAR(y[r * out + o], ref, 1e-5 * mag + 1e-6) << "in " << in << " rows " << rows << " r " << r;
        }
      }
      if (rows == 1) row0_alone.assign(y.begin(), y.begin() + out);
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(y[o], row0_alone[o]) << "row 0 changed with " << rows << " rows (in " << in << ")";
      }
    }
  }
}

TEST(LinearCuda, ManyRowsUseCublasWithinBf16Tolerance) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t rows = 40, in = 512, out = 300;
  const HostWeight w = RandomWeight(out, in, 3);
  WeightArena arena;
  auto dw = arena.UploadMatrix(TensorView::Contiguous(DType::kBF16, const_cast<uint16_t*>(w.bits.data()), {out, in}),
                               "w");
  ASSERT_TRUE(dw.ok());
  const std::vector<float> x = RandomVector(rows * in, 9);
  DeviceArray<float> dx = ToDevice(x, **ctx);
  auto dy = DeviceArray<float>::Create(rows * out, "y");
  ASSERT_TRUE(dy.ok());
  ASSERT_TRUE(Linear(**ctx, dx.data(), rows, *dw, dy->data()).ok());
  const std::vector<float> y = ToHost(*dy, **ctx);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        ref += static_cast<double>(x[r * in + i]) * w.at(o, i);
        mag += std::fabs(static_cast<double>(x[r * in + i]) * w.at(o, i));
      }
      EXPECT_NEAR(y[r * out + o], ref, 8e-3 * mag + 1e-6);  // x is rounded to bf16 (2^-8 relative)
    }
  }
}

TEST(NormCuda, RmsNormAndLayerNormMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t rows = 5, n = 1000;
  const std::vector<float> x = RandomVector(rows * n, 1);
  const std::vector<float> weight = RandomVector(n, 2);
  const std::vector<float> bias = RandomVector(n, 3);
  DeviceArray<float> dx = ToDevice(x, **ctx), dw = ToDevice(weight, **ctx), db = ToDevice(bias, **ctx);
  auto dout = DeviceArray<float>::Create(rows * n, "out");
  ASSERT_TRUE(dout.ok());
  std::vector<float> expected(static_cast<size_t>(rows * n));
  ASSERT_TRUE(RmsNorm(**ctx, dx.data(), dw.data(), rows, n, 1e-5, dout->data()).ok());
  std::vector<float> got = ToHost(*dout, **ctx);
  for (int64_t r = 0; r < rows; ++r) mtpspec::RmsNorm(&x[r * n], weight.data(), n, 1e-5, &expected[r * n]);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * (1 + std::fabs(expected[i])));
  ASSERT_TRUE(LayerNorm(**ctx, dx.data(), dw.data(), db.data(), rows, n, 1e-6, dout->data()).ok());
  got = ToHost(*dout, **ctx);
  for (int64_t r = 0; r < rows; ++r) {
    mtpspec::LayerNorm(&x[r * n], weight.data(), bias.data(), n, 1e-6, &expected[r * n]);
  }
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * (1 + std::fabs(expected[i])));
}

TEST(CudaContext, ReportsWhyNoDeviceIsUsable) {
  // Runs everywhere: without a GPU the status must say so, never crash.
  const absl::Status st = DeviceStatus();
  if (!st.ok()) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(st.message().empty());
    EXPECT_FALSE(Context::Create().ok());
  }
}

}  // namespace
}  // namespace mtpspec::cuda
