// The pair GEMM (kernels/pair_gemm.h), the GEMM path of FP8 and bf16 matrices whose input rows are
// bf16 or fp8 codes: every instruction set gives the same bits; the result matches a float64
// reference of the same rounded operands within the summation bound, and the small-row path (the
// pair tiles for FP8, f32 on the rounded rows for bf16) within twice it; the thread split does not
// change a bit; NaN weights give NaN in their outputs only; a bf16 row's scale does not matter, and
// its weights below 2^-26 of its largest are dropped. Shapes leave partial scale blocks, an odd
// width, partial row tiles and partial output groups.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "gtest/gtest.h"
#include "kernels/fp8_pairs.h"
#include "kernels/linear.h"
#include "kernels/pair_gemm.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec {
namespace {

using namespace linear_test;  // NOLINT: the shared test helpers

// The weight storages and input precisions that take the pair GEMM.
struct Case {
  DType dtype;
  ActivationPrecision precision;
};
constexpr Case kCases[] = {{DType::kF8E4M3, ActivationPrecision::kBf16},
                           {DType::kF8E4M3, ActivationPrecision::kFp8},
                           {DType::kBF16, ActivationPrecision::kBf16}};
std::string Name(const Case& c) {
  return std::string(DTypeName(c.dtype)) + " weights, " + ActivationPrecisionName(c.precision) + " rows";
}
constexpr int64_t kRowCounts[] = {24, 25, 63, 64, 65, 130};
const std::pair<int64_t, int64_t> kShapes[] = {{7, 300}, {49, 301}, {130, 129}, {6, 1024}, {48, 7}, {1, 128}};

TensorView Reduced(TensorView w, ActivationPrecision precision) {
  w.activations = precision;
  return w;
}

// Rows whose scale varies by 8^(r mod 5 − 2), so that each row has its own power of two 2^-e.
std::vector<float> Rows(int64_t rows, int64_t in, uint32_t seed) {
  std::vector<float> x = RandomFloats(rows * in, seed);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in; ++i) x[r * in + i] *= std::ldexp(1.0f, 3 * static_cast<int>(r % 5) - 6);
  }
  return x;
}

std::vector<PairGemmIsa> AvailableIsas() {
  std::vector<PairGemmIsa> isas = {PairGemmIsa::kScalar};
  if (PairGemmBestIsa() >= PairGemmIsa::kAvx2) isas.push_back(PairGemmIsa::kAvx2);
  if (PairGemmBestIsa() >= PairGemmIsa::kAvx512Bf16) isas.push_back(PairGemmIsa::kAvx512Bf16);
  return isas;
}

TEST(PairGemmTest, EveryInstructionSetGivesTheSameBits) {
  std::printf("best instruction set here: %s\n", PairGemmIsaName(PairGemmBestIsa()));
  for (const auto& [out, in] : kShapes) {
    for (const Case& c : kCases) {
      const ActivationPrecision precision = c.precision;
      const TestWeight w = MakeWeight(c.dtype, out, in, in + 5, static_cast<uint32_t>(out * 31 + in));
      for (int64_t rows : kRowCounts) {
        const std::vector<float> x = Rows(rows, in, static_cast<uint32_t>(rows));
        Fp8PairInput codes;
        PrepareFp8PairInput(x.data(), rows, in, precision, &codes);
        PairGemmInput input;
        PreparePairGemmInput(codes, &input);
        std::vector<float> reference(rows * out);
        {
          PairGemmIsaScope scalar(PairGemmIsa::kScalar);
          PairGemm(input, w.view, 0, out, reference.data(), out, 0);
        }
        for (PairGemmIsa isa : AvailableIsas()) {
          PairGemmIsaScope scope(isa);
          std::vector<float> y(rows * out, -1.0f);
          PairGemm(input, w.view, 0, out, y.data(), out, 0);
          for (int64_t i = 0; i < rows * out; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(reference[i]))
                << PairGemmIsaName(isa) << ", " << Name(c) << ", out " << out << " in " << in << " rows " << rows
                << " at " << i;
          }
        }
      }
    }
  }
}

// Linear takes the pair GEMM from kLinearGemmRows rows: against the float64 reference of the values
// the kernels multiply (DequantiseFp8PairInput) and the weights' values, within the bound of an
// in-term chain, and against the row-invariant pair tiles within twice that; with 1 and 3 threads
// (which split the outputs differently) bit for bit the same, and through LinearRows over an output
// range that starts and ends inside a scale block.
TEST(PairGemmTest, MatchesTheReferenceAndTheSmallRowTiles) {
  ThreadPool one(1), three(3);
  for (const auto& [out, in] : kShapes) {
    for (const Case& c : kCases) {
      const ActivationPrecision precision = c.precision;
      const TestWeight w = MakeWeight(c.dtype, out, in, in, static_cast<uint32_t>(out + 17 * in));
      const TensorView view = Reduced(w.view, precision);
      for (int64_t rows : kRowCounts) {
        const std::vector<float> x = Rows(rows, in, static_cast<uint32_t>(3 * rows + 1));
        Fp8PairInput codes;
        PrepareFp8PairInput(x.data(), rows, in, precision, &codes);
        std::vector<float> q(rows * in);
        DequantiseFp8PairInput(codes, q.data());
        std::vector<float> y(rows * out), y3(rows * out), tiles(rows * out);
        Linear(x.data(), rows, view, y.data(), &one);
        Linear(x.data(), rows, view, y3.data(), &three);
        {
          RowInvariantScope small_rows;
          Linear(x.data(), rows, view, tiles.data(), &three);
        }
        const std::string name = Name(c);
        const char* what = name.c_str();
        ExpectNearReference(q, w.values, rows, in, out, y.data(), what);
        for (int64_t i = 0; i < rows * out; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(y3[i])) << what << " threads, at " << i;
        }
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            double magnitude = 0;
            for (int64_t i = 0; i < in; ++i) magnitude += std::fabs(static_cast<double>(q[r * in + i]) * w.values[o * in + i]);
            ASSERT_NEAR(y[r * out + o], tiles[r * out + o], 2 * (in + 16) * 0x1p-24 * magnitude + 1e-30)
                << what << " row " << r << " out " << o << " in " << in;
          }
        }
        if (out > 3) {
          const int64_t ob = 1, oe = out - 2;
          std::vector<float> part(rows * (oe - ob));
          LinearRows(x.data(), rows, view, ob, oe, part.data(), &three);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t o = ob; o < oe; ++o) {
              ASSERT_EQ(std::bit_cast<uint32_t>(part[r * (oe - ob) + (o - ob)]), std::bit_cast<uint32_t>(y[r * out + o]))
                  << what << " LinearRows row " << r << " out " << o;
            }
          }
        }
      }
    }
  }
}

// Runs 30 rows through w ([20, 260]) with bf16 rows on every instruction set: `bad` holds for
// exactly outputs 3 and 11, in every row.
void ExpectOnlyOutputs3And11(const TensorView& w, bool (*bad)(float)) {
  const int64_t out = 20, in = 260, rows = 30;
  const std::vector<float> x = Rows(rows, in, 4);
  for (PairGemmIsa isa : AvailableIsas()) {
    PairGemmIsaScope scope(isa);
    std::vector<float> y(rows * out);
    Linear(x.data(), rows, Reduced(w, ActivationPrecision::kBf16), y.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        EXPECT_EQ(bad(y[r * out + o]), o == 3 || o == 11) << PairGemmIsaName(isa) << " row " << r << " out " << o;
      }
    }
  }
}

// A NaN code in weight row o makes exactly output o NaN in every row; the others stay finite.
TEST(PairGemmTest, NanCodesGiveNanInTheirOutputsOnly) {
  TestWeight w = MakeWeight(DType::kF8E4M3, 20, 260, 260, 9);
  w.fp8[3 * 260 + 200] = 0x7f;
  w.fp8[11 * 260 + 0] = 0xff;
  w.view.fp8_nan_free = false;
  ExpectOnlyOutputs3And11(w.view, [](float v) { return std::isnan(v); });
}

// A NaN or an infinite bf16 weight makes exactly its output non-finite in every row.
TEST(PairGemmTest, NonFiniteBf16WeightsGiveNonFiniteOutputsOnly) {
  TestWeight w = MakeWeight(DType::kBF16, 20, 260, 260, 9);
  w.bf16[3 * 260 + 200] = 0x7fc0;  // NaN
  w.bf16[11 * 260 + 0] = 0xff80;   // -inf
  ExpectOnlyOutputs3And11(w.view, [](float v) { return !std::isfinite(v); });
}

// A bf16 row times 2^k gives outputs times 2^k, bit for bit, for k from -90 to 100 (the row's own
// scale absorbs it); and weights below 2^-26 of the row's largest are dropped, on every instruction
// set, with the same bits.
TEST(PairGemmTest, Bf16RowScaleIsExactAndTinyWeightsAreDropped) {
  const int64_t out = 9, in = 300, rows = 40;
  const TestWeight w = MakeWeight(DType::kBF16, out, in, in, 21);
  const std::vector<float> x = Rows(rows, in, 5);
  std::vector<float> base(rows * out);
  Linear(x.data(), rows, Reduced(w.view, ActivationPrecision::kBf16), base.data());
  for (int k : {-90, -30, 7, 40, 100}) {
    std::vector<uint16_t> scaled(w.bf16);
    for (uint16_t& b : scaled) b = F32ToBf16(std::ldexp(Bf16ToF32(b), k));
    const TensorView view = Reduced(TensorView::Contiguous(DType::kBF16, scaled.data(), {out, in}),
                                    ActivationPrecision::kBf16);
    std::vector<float> y(rows * out);
    Linear(x.data(), rows, view, y.data());
    for (int64_t i = 0; i < rows * out; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(std::ldexp(base[i], k))) << "k " << k << " at " << i;
    }
  }
  // Row 2 holds 1 at input 0, which every row leaves at 0, and 2^-27 or 2^-40 elsewhere; row 5 holds
  // 1 there and subnormals elsewhere: both are dropped, so the outputs are exactly 0. Row 7 holds
  // ±2^-26, the smallest kept.
  std::vector<uint16_t> tiny(w.bf16);
  for (int64_t o : {2, 5, 7}) {
    for (int64_t i = 0; i < in; ++i) {
      const float sign = i % 2 == 0 ? 1.0f : -1.0f;
      tiny[o * in + i] = i == 0 ? F32ToBf16(1.0f)
                         : o == 5 ? uint16_t{0x0003}
                         : o == 7 ? F32ToBf16(std::ldexp(sign, -26))
                                  : F32ToBf16(std::ldexp(sign, i % 3 == 0 ? -40 : -27));
    }
  }
  std::vector<float> x0 = x;
  for (int64_t r = 0; r < rows; ++r) x0[r * in] = 0.0f;
  ThreadPool calling_thread(1);  // the instruction set is chosen per thread
  const TensorView tiny_view =
      Reduced(TensorView::Contiguous(DType::kBF16, tiny.data(), {out, in}), ActivationPrecision::kBf16);
  std::vector<float> scalar(rows * out);
  {
    PairGemmIsaScope scope(PairGemmIsa::kScalar);
    Linear(x0.data(), rows, tiny_view, scalar.data(), &calling_thread);
  }
  for (PairGemmIsa isa : AvailableIsas()) {
    PairGemmIsaScope scope(isa);
    std::vector<float> y(rows * out);
    Linear(x0.data(), rows, tiny_view, y.data(), &calling_thread);
    for (int64_t i = 0; i < rows * out; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(scalar[i])) << PairGemmIsaName(isa) << " at " << i;
    }
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(y[r * out + 2], 0.0f) << PairGemmIsaName(isa) << " row " << r;
      EXPECT_EQ(y[r * out + 5], 0.0f) << PairGemmIsaName(isa) << " row " << r;
      EXPECT_NE(y[r * out + 3], 0.0f) << PairGemmIsaName(isa) << " row " << r;
      EXPECT_NE(y[r * out + 7], 0.0f) << PairGemmIsaName(isa) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace mtpspec
