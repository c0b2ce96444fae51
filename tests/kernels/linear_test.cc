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
#include "tests/kernels/linear_test_util.h"

namespace mtpspec {
namespace {

using namespace linear_test;  // NOLINT: the shared test helpers

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

// Rows of x at any address give the same bits: Linear copies several rows that start off a 64-byte
// line to one before the tiles read them (when the range is long enough to pay for the copy), and
// a row's result must not depend on where it was read from.
TEST_P(LinearTest, InputRowsOffALineGiveTheBitsOfAlignedOnes) {
  ThreadPool pool(2);
  constexpr int64_t kOut = 1100, kIn = 160;  // 550 weight rows a thread: over 64 per input row
  const TestWeight w = MakeWeight(GetParam(), kOut, kIn, kIn, 21);
  const std::vector<float> x = RandomFloats(5 * kIn, 22);
  std::vector<float> storage(5 * kIn + 32);
  for (int64_t rows = 1; rows <= 5; ++rows) {
    std::vector<float> expected(rows * kOut);
    for (int64_t r = 0; r < rows; ++r) Linear(x.data() + r * kIn, 1, w.view, expected.data() + r * kOut, &pool);
    for (int64_t offset = 0; offset < 16; offset += 5) {  // 0, 20, 40 and 60 bytes past a line
      float* at = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16 + offset;
      std::copy(x.begin(), x.begin() + rows * kIn, at);
      std::vector<float> y(rows * kOut);
      Linear(at, rows, w.view, y.data(), &pool);
      ASSERT_EQ(y, expected) << "rows " << rows << " offset " << offset;
    }
  }
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

#if defined(__AVX512F__)
// CombineRows gives each output one FMA per combined row, in row order, from zero: exactly the scalar
// chain y = fma(x[k], w[k][c], y) for k = 0, 1, …, whatever the row count, the width and the passes
// of 128 rows it takes over long inputs (the SIMD build; the portable one multiplies and adds).
TEST(LinearTest, CombineRowsIsOneFmaChainInRowOrder) {
  for (int64_t count : {1, 127, 128, 129, 300, 600}) {
    for (int64_t width : {1, 17, 300, 512}) {
      const std::vector<float> w = RandomFloats(count * width, static_cast<uint32_t>(count + width));
      std::vector<const float*> w_rows(count);
      for (int64_t k = 0; k < count; ++k) w_rows[k] = w.data() + k * width;
      for (int64_t rows : {1, 3, 5}) {
        const std::vector<float> x = RandomFloats(rows * count, 31);
        std::vector<float> y(rows * width, -1.0f);
        CombineRows(x.data(), rows, count, w_rows.data(), count, width, y.data(), width);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < width; ++c) {
            float chain = 0.0f;
            for (int64_t k = 0; k < count; ++k) chain = std::fma(x[r * count + k], w[k * width + c], chain);
            ASSERT_EQ(std::bit_cast<uint32_t>(y[r * width + c]), std::bit_cast<uint32_t>(chain))
                << "count " << count << " width " << width << " rows " << rows << " at (" << r << ", " << c << ")";
          }
        }
      }
    }
  }
}

// DotRows sums each product in one of 16 lane chains (lane l: the elements i ≡ l mod 16, one FMA
// each, in order; the lanes past the end of a row add 0 · 0), then adds the lanes by halves: i and
// i + 8, then i and i + 4, then 0 and 2 and 1 and 3, then those two. Every tile shape gives exactly
// that, from one query row against one key up to 4 × 4 tiles reduced together.
TEST(LinearTest, DotRowsIsSixteenLaneChainsAddedByHalves) {
  for (int64_t n : {1, 15, 16, 17, 64, 128, 300, 576}) {
    for (int64_t count : {1, 3, 4, 9}) {
      const std::vector<float> w = RandomFloats(count * n, static_cast<uint32_t>(7 * n + count));
      std::vector<const float*> w_rows(count);
      for (int64_t o = 0; o < count; ++o) w_rows[o] = w.data() + o * n;
      for (int64_t rows : {1, 2, 3, 4, 9}) {
        const std::vector<float> x = RandomFloats(rows * n, static_cast<uint32_t>(rows + 40));
        std::vector<float> y(rows * count);
        DotRows(x.data(), rows, n, w_rows.data(), count, n, y.data(), count);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < count; ++o) {
            float lane[16] = {};
            for (int64_t i = 0; i < (n + 15) / 16 * 16; ++i) {
              const float a = i < n ? x[r * n + i] : 0.0f, b = i < n ? w[o * n + i] : 0.0f;
              lane[i % 16] = std::fma(b, a, lane[i % 16]);
            }
            float eighths[8], quarters[4];
            for (int i = 0; i < 8; ++i) eighths[i] = lane[i + 8] + lane[i];
            for (int i = 0; i < 4; ++i) quarters[i] = eighths[i + 4] + eighths[i];
            const float sum = (quarters[0] + quarters[2]) + (quarters[1] + quarters[3]);
            ASSERT_EQ(std::bit_cast<uint32_t>(y[r * count + o]), std::bit_cast<uint32_t>(sum))
                << "n " << n << " count " << count << " rows " << rows << " at (" << r << ", " << o << ")";
          }
        }
      }
    }
  }
}
#endif

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
    if (n > 2) {
      EXPECT_EQ(p[n / 2], 0.0f) << "a -inf score must weigh exactly 0";
    }
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

}  // namespace
}  // namespace mtpspec
