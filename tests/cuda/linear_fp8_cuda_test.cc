// FP8 weights in kernels/linear_cuda (DeviceWeightFormat::kFp8: e4m3 bytes and f32 128 × 128 block
// scales kept as stored) against a float64 reference of dequant(W8) · x, the bf16 upload of the same
// matrix, and the row-count invariance that makes speculative output equal plain output.
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "kernels/linear_cuda.h"
#include "kernels/linear_cuda_launch.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec::cuda {
namespace {

using linear_test::ExpectNearReference;
using linear_test::Fp8View;
using linear_test::MakeWeight;
using linear_test::RandomFloats;
using linear_test::TestWeight;

// (out, in, row stride): partial edge blocks on both sides, rows with 8-byte loads and without.
const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {
    {37, 1, 1}, {130, 7, 8}, {260, 100, 104}, {37, 250, 256}, {129, 257, 264}, {200, 1024, 1024}, {130, 1031, 1031}};

DeviceMatrix UploadFp8(WeightArena& arena, const TensorView& w) {
  auto m = arena.UploadLinearMatrix(w, "w");
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->is_fp8());
  return *m;
}

// y[rows, out_end − out_begin] of LinearRows.
std::vector<float> RunRows(Context& ctx, const float* dx, int64_t rows, const DeviceMatrix& w, int64_t out_begin,
                           int64_t out_end) {
  auto dy = DeviceArray<float>::Create(rows * (out_end - out_begin), "y");
  EXPECT_TRUE(dy.ok());
  const absl::Status st = LinearRows(ctx, dx, rows, w, out_begin, out_end, dy->data());
  EXPECT_TRUE(st.ok()) << st;
  return ToHost(*dy, ctx);
}

std::vector<float> Product(Context& ctx, const float* dx, int64_t rows, const DeviceMatrix& w) {
  return RunRows(ctx, dx, rows, w, 0, w.out);
}

TEST(LinearFp8Cuda, SmallRowsMatchDoubleReferenceAndAreRowCountInvariant) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const auto& [out, in, stride] : kShapes) {
    SCOPED_TRACE(testing::Message() << out << " x " << in << " (stride " << stride << ")");
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, stride, 17 + static_cast<uint32_t>(in));
    WeightArena arena(DeviceWeightFormat::kFp8);
    const DeviceMatrix dw = UploadFp8(arena, w.view);
    const std::vector<float> x = RandomFloats(kMaxGemvRows * in, 5);  // [16, in]
    DeviceArray<float> dx = ToDevice(x, **ctx);
    std::vector<std::vector<float>> alone(kMaxGemvRows);  // row r computed in a 1-row call, [out]
    for (int64_t r = 0; r < kMaxGemvRows; ++r) alone[r] = Product(**ctx, dx.data() + r * in, 1, dw);
    for (int64_t rows = 1; rows <= kMaxGemvRows; ++rows) {
      const std::vector<float> y = Product(**ctx, dx.data(), rows, dw);
      ExpectNearReference(x, w.values, rows, in, out, y.data(), "FP8 GEMV");
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::memcmp(y.data() + r * out, alone[r].data(), out * sizeof(float)), 0)
            << "row " << r << " of a " << rows << "-row call differs from the row alone";
      }
    }
  }
}

// Every e4m3 byte: row 0 holds all 256 (NaN codes 0x7F and 0xFF included, so it is NaN), row 1 the
// same with the NaN codes zeroed, row 2 ±0 only, row 3 the subnormals of both signs; a width of 260
// puts a partial block at the end and the scales differ per block.
TEST(LinearFp8Cuda, EveryByteIncludingSubnormalsZerosAndNanCodes) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t out = 4, in = 260;
  std::vector<uint8_t> bytes(out * in);  // [4, 260]
  for (int64_t i = 0; i < in; ++i) {
    const auto code = static_cast<uint8_t>(i & 0xFF);
    bytes[0 * in + i] = code;
    bytes[1 * in + i] = (code & 0x7F) == 0x7F ? 0 : code;
    bytes[2 * in + i] = (i % 2) ? 0x80 : 0x00;
    bytes[3 * in + i] = static_cast<uint8_t>(((i / 7) % 2 ? 0x80 : 0x00) | (1 + i % 7));
  }
  const std::vector<float> scales = {0.5f, 3.0f, 0.0173f};  // [1, 3]
  const TensorView view = Fp8View(bytes.data(), out, in, in, scales.data());
  std::vector<float> values(out * in);  // dequant(W8): the reference's weights
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) values[o * in + i] = F8E4M3ToF32(bytes[o * in + i]) * scales[i / 128];
  }
  WeightArena arena(DeviceWeightFormat::kFp8);
  const DeviceMatrix dw = UploadFp8(arena, view);
  const int64_t max_rows = 20;
  const std::vector<float> x = RandomFloats(max_rows * in, 9);  // [20, in]
  DeviceArray<float> dx = ToDevice(x, **ctx);
  for (const int64_t rows : {1, 5, 16}) {
    const std::vector<float> y = Product(**ctx, dx.data(), rows, dw);
    ExpectNearReference(x, values, rows, in, out, y.data(), "FP8 GEMV, every byte");
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(y[r * out + 2], 0.0f) << "±0 weights, row " << r;
  }
  // The prefill path: NaN where a NaN code is, finite elsewhere.
  const std::vector<float> y = Product(**ctx, dx.data(), max_rows, dw);
  for (int64_t r = 0; r < max_rows; ++r) {
    EXPECT_TRUE(std::isnan(y[r * out + 0])) << "row " << r;
    for (int64_t o = 1; o < out; ++o) EXPECT_TRUE(std::isfinite(y[r * out + o])) << "row " << r << ", out " << o;
  }
}

// The widening for cuBLAS gives the values of the bf16 upload, bit for bit, from any first row.
TEST(LinearFp8Cuda, WidenedRowsAreTheBf16UploadsValues) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t out = 300, in = 1031;
  const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, 1040, 23);
  WeightArena arena(DeviceWeightFormat::kFp8);
  const DeviceMatrix fp8 = UploadFp8(arena, w.view);
  auto bf16 = arena.UploadMatrix(w.view, "w as bf16");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  ASSERT_FALSE(bf16->is_fp8());
  std::vector<uint16_t> uploaded(out * in);  // [out, in]
  ASSERT_EQ(cudaMemcpy(uploaded.data(), bf16->data, uploaded.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t i = 0; i < out * in; ++i) ASSERT_EQ(uploaded[i], F32ToBf16(w.values[i])) << i;
  for (const int64_t row_begin : {int64_t{0}, int64_t{77}, int64_t{128}}) {
    const int64_t rows = out - row_begin;
    auto widened = DeviceArray<uint16_t>::Create(rows * in, "widened");
    ASSERT_TRUE(widened.ok());
    ASSERT_EQ(launch::WidenFp8ToBf16(fp8.fp8, row_begin, rows, in, reinterpret_cast<__nv_bfloat16*>(widened->data()),
                                     (*ctx)->stream()),
              cudaSuccess);
    const std::vector<uint16_t> got = ToHost(*widened, **ctx);
    ASSERT_EQ(std::memcmp(got.data(), uploaded.data() + row_begin * in, got.size() * sizeof(uint16_t)), 0)
        << "rows from " << row_begin;
  }
}

// Above 16 rows an FP8 matrix multiplies exactly what its bf16 upload would.
TEST(LinearFp8Cuda, ManyRowsEqualTheBf16UploadBitForBit) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t out = 300, in = 520;
  const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in, 29);
  WeightArena arena(DeviceWeightFormat::kFp8);
  const DeviceMatrix fp8 = UploadFp8(arena, w.view);
  auto bf16 = arena.UploadMatrix(w.view, "w as bf16");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const int64_t max_rows = 97;
  const std::vector<float> x = RandomFloats(max_rows * in, 31);
  DeviceArray<float> dx = ToDevice(x, **ctx);
  for (const int64_t rows : {17, 40, 97}) {
    const std::vector<float> from_fp8 = Product(**ctx, dx.data(), rows, fp8);
    const std::vector<float> from_bf16 = Product(**ctx, dx.data(), rows, *bf16);
    EXPECT_EQ(std::memcmp(from_fp8.data(), from_bf16.data(), from_fp8.size() * sizeof(float)), 0) << rows << " rows";
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < in; ++i) {
          exact += static_cast<double>(x[r * in + i]) * w.values[o * in + i];
          magnitude += std::fabs(static_cast<double>(x[r * in + i]) * w.values[o * in + i]);
        }
        // x and the weights are rounded to bf16 (2^-8 relative each).
        ASSERT_NEAR(from_fp8[r * out + o], exact, 8e-3 * magnitude + 1e-6) << "row " << r << ", out " << o;
      }
    }
  }
}

// A range of outputs is those columns of the whole product, bit for bit, on both paths (the scale
// rows of a range that starts inside a block count from the matrix's row 0).
TEST(LinearFp8Cuda, RowRangesAreColumnsOfTheFullProduct) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t out = 300, in = 520;
  const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in, 37);
  WeightArena arena(DeviceWeightFormat::kFp8);
  const DeviceMatrix dw = UploadFp8(arena, w.view);
  const std::vector<float> x = RandomFloats(20 * in, 41);
  DeviceArray<float> dx = ToDevice(x, **ctx);
  for (const int64_t rows : {3, 20}) {
    const std::vector<float> full = Product(**ctx, dx.data(), rows, dw);
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{100, 250}, {128, 129}, {255, 300}, {0, 1}}) {
      const std::vector<float> part = RunRows(**ctx, dx.data(), rows, dw, begin, end);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::memcmp(part.data() + r * (end - begin), full.data() + r * out + begin,
                              (end - begin) * sizeof(float)),
                  0)
            << "outputs [" << begin << ", " << end << "), " << rows << " rows, row " << r;
      }
    }
  }
}

TEST(LinearFp8Cuda, TheArenasFormatDecidesWhatStaysFp8) {
  MTPSPEC_REQUIRE_GPU();
  const int64_t out = 130, in = 300;
  const TestWeight fp8 = MakeWeight(DType::kF8E4M3, out, in, in, 43);
  const TestWeight bf16 = MakeWeight(DType::kBF16, out, in, in, 47);
  WeightArena widening(DeviceWeightFormat::kBf16);
  auto widened = widening.UploadLinearMatrix(fp8.view, "w");
  ASSERT_TRUE(widened.ok()) << widened.status();
  EXPECT_FALSE(widened->is_fp8());
  EXPECT_EQ(widened->bytes(), static_cast<size_t>(2 * out * in));

  WeightArena keeping(DeviceWeightFormat::kFp8);
  auto kept = keeping.UploadLinearMatrix(fp8.view, "w");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->is_fp8());
  EXPECT_EQ(kept->bytes(), static_cast<size_t>(out * in) + 2 * 3 * sizeof(float));  // scales [2, 3]
  auto stays_bf16 = keeping.UploadLinearMatrix(bf16.view, "b");
  ASSERT_TRUE(stays_bf16.ok());
  EXPECT_FALSE(stays_bf16->is_fp8());
  auto for_bf16_kernels = keeping.UploadMatrix(fp8.view, "kv_b_proj");
  ASSERT_TRUE(for_bf16_kernels.ok());
  EXPECT_FALSE(for_bf16_kernels->is_fp8());

  TensorView for_bf16_rows = fp8.view;  // loaded for bf16 input rows: the device takes f32 rows only
  for_bf16_rows.activations = ActivationPrecision::kBf16;
  auto refused = keeping.UploadLinearMatrix(for_bf16_rows, "model.layers.3.self_attn.o_proj.weight");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.layers.3.self_attn.o_proj.weight"), std::string::npos);
}

}  // namespace
}  // namespace mtpspec::cuda
