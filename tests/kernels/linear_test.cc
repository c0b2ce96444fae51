// Linear, softmax and SiLU (kernels/linear.h) and the calling-thread kernels (kernels/row_kernels.h) against a
// double-precision reference, plus the determinism the speculative-decoding tests rely on: below 24
// rows a row's result is bitwise independent of the other rows, the thread split and repetition.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/linear.h"
#include "core/parallel.h"
#include "kernels/row_kernels.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

// Lengths around the 16-lane vectors and the 64-byte lines, up to a hidden size.
const int64_t kInSizes[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 511, 1000, 1024};

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
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
uint8_t RandomFp8(std::mt19937& rng) {
  for (;;) {
    const auto b = static_cast<uint8_t>(rng() & 0xFF);
    if ((b & 0x7F) != 0x7F) return b;
  }
}

// The view of FP8 bytes [out, in] (row stride `stride`) with scales [⌈out/128⌉, ⌈in/128⌉].
TensorView Fp8View(const uint8_t* bytes, int64_t out, int64_t in, int64_t stride, const float* scales) {
  TensorView v = TensorView::Contiguous(DType::kF8E4M3, const_cast<uint8_t*>(bytes), {out, in});
  v.stride[0] = stride;
  v.block_scale = scales;
  v.scale_stride = (in + kFp8Block - 1) / kFp8Block;
  return v;
}

TestWeight MakeWeight(DType dtype, int64_t out, int64_t in, int64_t stride, uint32_t seed) {
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
// (in + 16)·2⁻²⁴·Σ|x·w| (a sequential sum of `in` terms plus a 16-lane reduction).
void ExpectNearReference(const std::vector<float>& x, const std::vector<float>& w_values, int64_t rows,
                         int64_t in, int64_t out, const float* y, const char* what) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double term = static_cast<double>(x[r * in + i]) * w_values[o * in + i];
        exact += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(y[r * out + o], exact, (in + 16) * 0x1p-24 * magnitude + 1e-30)
          << what << " row " << r << " of " << rows << ", out " << o << ", in " << in;
    }
  }
}

class LinearTest : public ::testing::TestWithParam<DType> {};

TEST_P(LinearTest, MatchesDoubleReferenceForAllRowCountsAndWidths) {
  constexpr int64_t kOut = 37;  // not a multiple of the 4-row weight tile
  ThreadPool pool(3);
  for (int64_t in : kInSizes) {
    const TestWeight w = MakeWeight(GetParam(), kOut, in, in + 5, static_cast<uint32_t>(in));
    const std::vector<float> x = RandomFloats(40 * in, 1000 + static_cast<uint32_t>(in));
    for (int64_t rows = 1; rows <= 40; ++rows) {
      std::vector<float> y(rows * kOut);
      Linear(x.data(), rows, w.view, y.data(), &pool);
      ExpectNearReference(x, w.values, rows, in, kOut, y.data(), "Linear");
    }
  }
}

TEST_P(LinearTest, SmallRowResultsDependOnlyOnTheRow) {
  ThreadPool one(1), three(3);
  // 300 x 1024 spans several of the 256 KB chunks that row groups beyond the first 4 rows share
  // (64 rows of f32, 128 of bf16), with a partial last chunk.
  const std::pair<int64_t, int64_t> kShapes[] = {{45, 15}, {45, 64}, {45, 100}, {45, 1024}, {300, 1024}};
  for (const auto& [kOut, in] : kShapes) {
    const TestWeight w = MakeWeight(GetParam(), kOut, in, in, 7 + static_cast<uint32_t>(in + kOut));
    const std::vector<float> x = RandomFloats(23 * in, 99);
    // Each row alone, single-threaded: the reference bits.
    std::vector<float> alone(23 * kOut);
    for (int64_t r = 0; r < 23; ++r) Linear(x.data() + r * in, 1, w.view, alone.data() + r * kOut, &one);
    for (int64_t rows = 1; rows < 24; ++rows) {
      for (ThreadPool* pool : {&one, &three}) {
        std::vector<float> y(rows * kOut);
        Linear(x.data(), rows, w.view, y.data(), pool);
        for (int64_t i = 0; i < rows * kOut; ++i) {
          ASSERT_EQ(y[i], alone[i]) << "rows " << rows << " out " << kOut << " in " << in << " threads "
                                    << pool->num_threads();
        }
      }
    }
  }
}

TEST_P(LinearTest, RepeatsAreBitwiseIdentical) {
  ThreadPool pool(3);
  const TestWeight w = MakeWeight(GetParam(), 300, 257, 257, 5);
  const std::vector<float> x = RandomFloats(40 * 257, 6);
  for (int64_t rows : {1, 5, 23, 24, 40}) {
    std::vector<float> first(rows * 300), again(rows * 300);
    Linear(x.data(), rows, w.view, first.data(), &pool);
    for (int repeat = 0; repeat < 5; ++repeat) {
      Linear(x.data(), rows, w.view, again.data(), &pool);
      ASSERT_EQ(first, again) << "rows " << rows;
    }
  }
}

TEST_P(LinearTest, LinearRowsComputesASubrangeOfOutputs) {
  ThreadPool pool(2);
  const TestWeight w = MakeWeight(GetParam(), 50, 33, 40, 8);
  const std::vector<float> x = RandomFloats(30 * 33, 9);
  for (int64_t rows : {1, 3, 30}) {
    std::vector<float> full(rows * 50), part(rows * 20);
    Linear(x.data(), rows, w.view, full.data(), &pool);
    LinearRows(x.data(), rows, w.view, 17, 37, part.data(), &pool);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < 20; ++o) {
        EXPECT_NEAR(part[r * 20 + o], full[r * 50 + 17 + o], 1e-5) << "rows " << rows;
        if (rows < 24) {
          EXPECT_EQ(part[r * 20 + o], full[r * 50 + 17 + o]);
        }
      }
    }
  }
}

TEST_P(LinearTest, BatchEqualsSeparateCalls) {
  ThreadPool pool(3);
  const TestWeight a = MakeWeight(GetParam(), 70, 64, 64, 10);
  const TestWeight b = MakeWeight(GetParam(), 9, 100, 100, 11);
  const TestWeight c = MakeWeight(GetParam(), 130, 64, 64, 12);
  const std::vector<float> xa = RandomFloats(5 * 64, 13), xb = RandomFloats(2 * 100, 14), xc = RandomFloats(64, 15);
  std::vector<float> ya(5 * 70), yb(2 * 9), yc(130), ra(ya.size()), rb(yb.size()), rc(yc.size());
  const LinearJob jobs[] = {{xa.data(), 5, a.view, ya.data()},
                            {xb.data(), 0, b.view, nullptr},  // an empty job is skipped
                            {xb.data(), 2, b.view, yb.data()},
                            {xc.data(), 1, c.view, yc.data()}};
  LinearBatch(jobs, &pool);
  Linear(xa.data(), 5, a.view, ra.data(), &pool);
  Linear(xb.data(), 2, b.view, rb.data(), &pool);
  Linear(xc.data(), 1, c.view, rc.data(), &pool);
  EXPECT_EQ(ya, ra);
  EXPECT_EQ(yb, rb);
  EXPECT_EQ(yc, rc);
}

// DotRows and CombineRows: reference values, and each output independent of the row count.
// (The row kernels read f32 and bf16 rows only.)
class RowKernelTest : public ::testing::TestWithParam<DType> {};

TEST_P(RowKernelTest, RowKernelsMatchReferenceAndDependOnlyOnTheRow) {
  for (int64_t n : {1, 16, 31, 64, 288}) {
    for (int64_t count : {1, 5, 17, 70}) {
      // DotRows: w holds `count` rows of length n.
      const TestWeight w = MakeWeight(GetParam(), count, n, n, static_cast<uint32_t>(n * 100 + count));
      std::vector<const float*> f32_rows(count);
      std::vector<const uint16_t*> bf16_rows(count);
      for (int64_t o = 0; o < count; ++o) {
        f32_rows[o] = w.f32.empty() ? nullptr : w.f32.data() + o * n;
        bf16_rows[o] = w.bf16.empty() ? nullptr : w.bf16.data() + o * n;
      }
      const std::vector<float> x = RandomFloats(9 * n, 3);
      auto dot_rows = [&](const float* xs, int64_t rows, float* y) {
        if (GetParam() == DType::kBF16) {
          DotRows(xs, rows, n, bf16_rows.data(), count, n, y, count);
        } else {
          DotRows(xs, rows, n, f32_rows.data(), count, n, y, count);
        }
      };
      std::vector<float> y(9 * count), alone(count);
      dot_rows(x.data(), 9, y.data());
      ExpectNearReference(x, w.values, 9, n, count, y.data(), "DotRows");
      for (int64_t r = 0; r < 9; ++r) {
        dot_rows(x.data() + r * n, 1, alone.data());
        for (int64_t o = 0; o < count; ++o) ASSERT_EQ(alone[o], y[r * count + o]);
      }

      // CombineRows: the same matrix read as `count` rows to combine, each of width n.
      const std::vector<float> coeff = RandomFloats(9 * count, 4);
      std::vector<float> transposed(n * count);  // [n, count] so that the reference is x · Wᵀ
      for (int64_t o = 0; o < count; ++o) {
        for (int64_t i = 0; i < n; ++i) transposed[i * count + o] = w.values[o * n + i];
      }
      std::vector<float> z(9 * n), z_alone(n);
      auto combine = [&](const float* xs, int64_t rows, float* out) {
        if (GetParam() == DType::kBF16) {
          CombineRows(xs, rows, count, bf16_rows.data(), count, n, out, n);
        } else {
          CombineRows(xs, rows, count, f32_rows.data(), count, n, out, n);
        }
      };
      combine(coeff.data(), 9, z.data());
      ExpectNearReference(coeff, transposed, 9, count, n, z.data(), "CombineRows");
      for (int64_t r = 0; r < 9; ++r) {
        combine(coeff.data() + r * count, 1, z_alone.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z_alone[i], z[r * n + i]) << "n " << n << " count " << count;
      }
    }
  }
}

TEST(LinearTest, DotRowsAccumulates) {
  const std::vector<float> x = RandomFloats(3 * 20, 1), w = RandomFloats(6 * 20, 2);
  std::vector<const float*> rows(6);
  for (int64_t o = 0; o < 6; ++o) rows[o] = w.data() + o * 20;
  std::vector<float> once(3 * 6), twice(3 * 6);
  DotRows(x.data(), 3, 20, rows.data(), 6, 20, once.data(), 6);
  DotRows(x.data(), 3, 20, rows.data(), 6, 20, twice.data(), 6);
  DotRows(x.data(), 3, 20, rows.data(), 6, 20, twice.data(), 6, /*accumulate=*/true);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], once[i] + once[i]);
}

// Softmax against a double-precision reference for lengths around the 16-lane blocks; −∞ scores get
// exactly 0; and the same scores at another address (another alignment) give the same bits.
TEST(ElementwiseTest, SoftmaxMatchesDoubleReferenceAndIgnoresAlignment) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> scores = RandomFloats(n, static_cast<uint32_t>(n));
    for (float& v : scores) v *= 30.0f;  // spreads of up to 60 nats, so some weights underflow towards 0
    if (n > 2) scores[n / 2] = kNegInf;
    double max_score = -INFINITY, sum = 0.0;
    for (float v : scores) max_score = std::max<double>(max_score, v);
    for (float v : scores) sum += std::exp(static_cast<double>(v) - max_score);
    std::vector<float> p = scores;
    ASSERT_TRUE(SoftmaxInPlace(p.data(), n));
    for (int64_t i = 0; i < n; ++i) {
      if (scores[i] == kNegInf) continue;  // checked below
      const double gap = max_score - scores[i];  // the f32 subtraction s − max rounds by up to gap·2⁻²⁴
      const double exact = std::exp(-gap) / sum;
      ASSERT_NEAR(p[i], exact, (4e-7 + 1.2e-7 * gap) * exact + 1e-38) << "n " << n << " i " << i;
    }
    if (n > 2) EXPECT_EQ(p[n / 2], 0.0f) << "a -inf score must weigh exactly 0";
    for (int64_t offset = 1; offset < 16; offset += 5) {
      std::vector<float> shifted(offset + n);
      std::copy(scores.begin(), scores.end(), shifted.begin() + offset);
      ASSERT_TRUE(SoftmaxInPlace(shifted.data() + offset, n));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(shifted[offset + i], p[i]) << "n " << n << " offset " << offset;
    }
  }
  std::vector<float> masked(20, kNegInf);
  EXPECT_FALSE(SoftmaxInPlace(masked.data(), 20));
  for (float v : masked) EXPECT_EQ(v, kNegInf) << "an all -inf row is left as it was";
  EXPECT_FALSE(SoftmaxInPlace(masked.data(), 0));
}

TEST(ElementwiseTest, SiluMulMatchesDoubleReferenceAndIgnoresAlignment) {
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> gate = RandomFloats(n, static_cast<uint32_t>(100 + n));
    const std::vector<float> up = RandomFloats(n, static_cast<uint32_t>(200 + n));
    for (float& v : gate) v *= 12.0f;
    if (n > 3) gate[3] = -120.0f;  // e^120 overflows a float: silu must still be about -0
    std::vector<float> y = gate;
    SiluMul(y.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i], exact = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_NEAR(y[i], exact, 4e-7 * std::abs(exact) + 1e-30) << "n " << n << " i " << i;
    }
    for (int64_t offset = 1; offset < 16; offset += 5) {
      std::vector<float> shifted(offset + n), up_shifted(offset + n);
      std::copy(gate.begin(), gate.end(), shifted.begin() + offset);
      std::copy(up.begin(), up.end(), up_shifted.begin() + offset);
      SiluMul(shifted.data() + offset, up_shifted.data() + offset, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(shifted[offset + i], y[i]) << "n " << n << " offset " << offset;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                         [](const auto& info) {
                           return info.param == DType::kF32 ? "f32" : info.param == DType::kBF16 ? "bf16" : "fp8";
                         });

INSTANTIATE_TEST_SUITE_P(Dtypes, RowKernelTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return info.param == DType::kF32 ? "f32" : "bf16"; });

// FP8 against a float64 reference of dequant(W8) · x: the exact products of the FP8 values and their
// block scales, summed in double. Dimensions that are not multiples of 128 leave partial edge blocks
// in both directions, and every row count from decode to prefill (1-40) is checked.
TEST(LinearFp8Test, MatchesFloat64DequantReferenceWithPartialEdgeBlocks) {
  ThreadPool pool(3);
  const std::pair<int64_t, int64_t> kShapes[] = {{37, 100}, {129, 130}, {259, 300}, {300, 1024}, {5, 1}};
  for (const auto& [out, in] : kShapes) {
    const TestWeight w = MakeWeight(DType::kF8E4M3, out, in, in + 3, static_cast<uint32_t>(out * 7 + in));
    const int64_t scale_cols = (in + kFp8Block - 1) / kFp8Block;
    const std::vector<float> x = RandomFloats(40 * in, 77);
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 15, 16, 23, 24, 40}) {
      std::vector<float> y(rows * out);
      Linear(x.data(), rows, w.view, y.data(), &pool);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double exact = 0, magnitude = 0;
          for (int64_t i = 0; i < in; ++i) {
            const double dequant = static_cast<double>(F8E4M3ToF32(w.fp8[o * (in + 3) + i])) *
                                   w.scales[(o / kFp8Block) * scale_cols + i / kFp8Block];
            exact += x[r * in + i] * dequant;
            magnitude += std::fabs(x[r * in + i] * dequant);
          }
          // The f32 product of a block's sum and its scale (the tiles), or of each weight and its
          // scale (the GEMM), adds one rounding to each term.
          ASSERT_NEAR(y[r * out + o], exact, (in + 17) * 0x1p-24 * magnitude + 1e-30)
              << "out " << out << " in " << in << " rows " << rows << " at (" << r << ", " << o << ")";
        }
      }
    }
  }
}

// WidenFp8Row (the prefill GEMM's and the loader's widening) gives F8E4M3ToF32(byte) · scale bit for
// bit: every byte, scales from the smallest positive float to the largest allowed one, and lengths
// that end inside a 16-lane vector and inside a 128-column block.
TEST(LinearFp8Test, WidenFp8RowIsTheScaledValueOfEveryByte) {
  const float kScales[] = {std::numeric_limits<float>::denorm_min(), 1e-30f, 0.37f, 1.0f, 3.0f, kMaxFp8BlockScale};
  for (int64_t n : {1, 15, 16, 17, 127, 128, 129, 256, 300}) {
    for (float first : kScales) {
      std::vector<uint8_t> bytes(n);
      for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>((i * 97 + n) % 256);
      const std::vector<float> scales = {first, 0.125f, first * 0.5f};  // [⌈300/128⌉]
      std::vector<float> out(n + 1, -7.0f);  // one guard element past the row
      WidenFp8Row(bytes.data(), scales.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const float expected = F8E4M3ToF32(bytes[i]) * scales[i / kFp8Block];
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(out[i])) << "n " << n << " at " << i;
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected))
              << "n " << n << " scale " << first << " byte 0x" << std::hex << int{bytes[i]};
        }
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the row, n " << n;
    }
  }
  // All 256 bytes in one row, against every scale.
  std::vector<uint8_t> all(256);
  for (int b = 0; b < 256; ++b) all[b] = static_cast<uint8_t>(b);
  for (float scale : kScales) {
    const std::vector<float> scales = {scale, scale};
    std::vector<float> out(256);
    WidenFp8Row(all.data(), scales.data(), 256, out.data());
    for (int b = 0; b < 256; ++b) {
      const float expected = F8E4M3ToF32(static_cast<uint8_t>(b)) * scale;
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(out[b])) << "byte " << b;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(out[b]), std::bit_cast<uint32_t>(expected)) << "byte " << b << " scale " << scale;
      }
    }
  }
}

// Every FP8 byte through the kernel: row o of a [256, 300] matrix holds byte o at column c_o and
// zeros elsewhere (columns in different scale blocks), so output o is x[c_o] · value(o) · scale,
// rounded in the order of the path that ran (the tiles scale a block's sum, the GEMM a weight):
// subnormals, ±0 and the largest values exactly, and the NaN encodings 0x7f and 0xff as NaN.
TEST(LinearFp8Test, EveryByteWidensExactly) {
  constexpr int64_t kOut = 256, kIn = 300;
  const int64_t scale_cols = (kIn + kFp8Block - 1) / kFp8Block;
  std::vector<uint8_t> bytes(kOut * kIn, 0);
  std::vector<float> scales = {1.0f, 0.37f, 3.0f, 0.5f, 2.0f, 0.125f};  // [2, 3]
  std::vector<float> x = RandomFloats(kIn, 3);
  for (float& v : x) v = v == 0.0f ? 1.0f : v;
  for (int64_t o = 0; o < kOut; ++o) bytes[o * kIn + (o * 37) % kIn] = static_cast<uint8_t>(o);
  const TensorView view = Fp8View(bytes.data(), kOut, kIn, kIn, scales.data());
  std::vector<float> y(kOut);
  ThreadPool pool(2);
  for (int64_t rows : {1, 3, 24, 40}) {  // the small-row tiles and the widening GEMM path
    std::vector<float> xs(rows * kIn);
    for (int64_t r = 0; r < rows; ++r) std::copy(x.begin(), x.end(), xs.begin() + r * kIn);
    std::vector<float> ys(rows * kOut);
    Linear(xs.data(), rows, view, ys.data(), &pool);
    for (int64_t o = 0; o < kOut; ++o) {
      const int64_t c = (o * 37) % kIn;
      const float value = F8E4M3ToF32(static_cast<uint8_t>(o));
      const float scale = scales[(o / kFp8Block) * scale_cols + c / kFp8Block];
      for (int64_t r = 0; r < rows; ++r) {
        const float got = ys[r * kOut + o];
        if (std::isnan(value)) {
          EXPECT_TRUE(std::isnan(got)) << "byte 0x" << std::hex << o;
        } else if (rows < kLinearGemmRows) {  // the tiles scale the block's sum
          EXPECT_EQ(got, (value * x[c]) * scale) << "byte 0x" << std::hex << o << ", " << rows << " rows";
        } else {  // the GEMM multiplies x by the widened weight
          EXPECT_EQ(got, (value * scale) * x[c]) << "byte 0x" << std::hex << o << ", " << rows << " rows";
        }
      }
    }
  }
}

}  // namespace
}  // namespace mtpspec
