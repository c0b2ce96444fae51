// The FP8 indexer (attention/indexer_fp8.h): the rotation against float64, the quantisation's scale
// and rounding, and the scores against a scalar model of the whole pipeline and against float64.
#include "attention/indexer_fp8.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention/indexer.h"
#include "attention/kv_cache.h"
#include "attention/rope.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/bf16_pairs.h"
#include "tests/attention/indexer_test_util.h"

namespace mtpspec {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = unit(rng) * std::exp(spread * unit(rng));
  return v;
}

// Entry (i, j) of the Sylvester Hadamard matrix: (−1)^popcount(i & j).
double Sylvester(int64_t i, int64_t j) { return std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0; }

TEST(IndexerFp8Test, HadamardRotateIsTheNormalisedSylvesterProductAndItsOwnInverse) {
  for (int64_t d : {1, 2, 16, 128}) {
    const std::vector<float> x = Random(d, static_cast<uint32_t>(d));
    std::vector<float> y = x;
    HadamardRotate(y.data(), d);
    double norm = 0.0;
    for (float v : x) norm += static_cast<double>(v) * v;
    for (int64_t i = 0; i < d; ++i) {
      double exact = 0.0;
      for (int64_t j = 0; j < d; ++j) exact += Sylvester(i, j) * x[j];
      exact /= std::sqrt(static_cast<double>(d));
      // log2(d) rounded sums of terms no larger than the vector's norm, then one rounded scaling.
      EXPECT_NEAR(y[i], exact, (std::log2(static_cast<double>(d)) + 2) * 0x1p-24 * std::sqrt(norm) * std::sqrt(d))
          << "d " << d << " i " << i;
    }
    HadamardRotate(y.data(), d);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(y[i], x[i], 1e-5 * std::sqrt(norm)) << "twice: d " << d << " i " << i;
  }
}

TEST(IndexerFp8Test, QuantizeFp8RowUsesTheSmallestPowerOfTwoScaleAndRoundsEachValueToNearest) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int64_t d = 128;
    const std::vector<float> x = Random(d, seed, 2.0f);
    std::vector<uint8_t> bytes(d);
    const float scale = QuantizeFp8Row(x.data(), d, bytes.data());
    float max_abs = 0.0f;
    for (float v : x) max_abs = std::max(max_abs, std::fabs(v));
    int exponent = 0;
    ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "scale " << scale << " is not a power of two";
    EXPECT_GE(scale * 448.0f, max_abs);
    EXPECT_LT(scale * 224.0f, max_abs) << "half the scale would also have held max|x|";
    for (int64_t i = 0; i < d; ++i) {
      const float value = F8E4M3ToF32(bytes[i]);
      ASSERT_FALSE(std::isnan(value));
      // Round to nearest: half a step of e4m3 at the value's size (2^-4 relative, 2^-10 absolute
      // in the subnormal range, in units of the scale).
      const double step = std::max(std::fabs(x[i] / scale) * 0x1p-4, 0x1p-10);
      EXPECT_LE(std::fabs(value - x[i] / scale), step) << "seed " << seed << " i " << i;
      EXPECT_EQ(bytes[i], F32ToF8E4M3(x[i] / scale));
    }
  }
  std::vector<float> zeros(8, 0.0f);
  std::vector<uint8_t> bytes(8);
  EXPECT_EQ(QuantizeFp8Row(zeros.data(), 8, bytes.data()), std::ldexp(1.0f, -22));  // 1e-4 / 448 → 2^-22
  for (uint8_t b : bytes) EXPECT_EQ(b, 0);
}

struct Fp8Cache {
  std::vector<uint8_t> bytes;  // [IndexKeyBlocks(capacity), d, 64], NaN codes in the unused slots
  std::vector<float> scales;   // [capacity]
  const uint8_t* data() const { return bytes.data(); }
};

// keys [num_keys, d] rotated and quantised into an FP8 cache of `capacity` slots, through the
// layout's offsets (not WriteIndexKey).
Fp8Cache ToFp8Cache(const std::vector<float>& keys, int64_t num_keys, int64_t capacity, int64_t d) {
  Fp8Cache cache{std::vector<uint8_t>(IndexKeyBlocks(capacity) * d * kIndexKeyBlock, 0x7f),
                 std::vector<float>(capacity, std::nanf(""))};
  std::vector<float> key(d);
  std::vector<uint8_t> bytes(d);
  for (int64_t j = 0; j < num_keys; ++j) {
    std::copy(keys.begin() + j * d, keys.begin() + (j + 1) * d, key.begin());
    HadamardRotate(key.data(), d);
    cache.scales[j] = QuantizeFp8Row(key.data(), d, bytes.data());
    for (int64_t t = 0; t < d; ++t) cache.bytes[IndexKeyPairOffset(j, t, d)] = bytes[t];
  }
  return cache;
}

uint32_t PairOf(const uint8_t* bytes, int64_t p) {
  uint16_t wide[2];
  WidenFp8ToBf16(bytes + 2 * p, 2, wide);
  return static_cast<uint32_t>(wide[0]) | static_cast<uint32_t>(wide[1]) << 16;
}

// Each score is, bit for bit: per head, the query rotated and quantised (its scale joining the head
// weight), one chain of bf16 pair steps over the e4m3 values of query and key, ReLU of the chain times
// d_I^-½, weighted and summed over the heads in order, times the key's scale.
TEST(IndexerFp8Test, ScoresAreTheRotatedQuantisedPipelineBitForBit) {
  const RotaryEmbedding no_rope;
  testing_util::CheckScoresBitForBit(
      [&](const IndexerDims& dims, const std::vector<float>& keys, int64_t num_keys, float* q, float* w, int64_t rows,
          const int64_t* positions, float* out) {
        const Fp8Cache cache = ToFp8Cache(keys, num_keys, num_keys + 5, dims.head_dim);
        IndexerScoresFromProjections(dims, no_rope, q, w, rows, positions, cache.data(), cache.scales.data(), num_keys,
                                     out);
      },
      [](const IndexerDims& dims, const float* q, const float* w, const std::vector<float>& keys, int64_t j) {
        const int64_t nh = dims.n_heads, d = dims.head_dim;
        std::vector<uint8_t> q8(nh * d), k8(d);
        std::vector<float> weights = testing_util::ScaledHeadWeights(dims, w), rotated(d);
        for (int64_t h = 0; h < nh; ++h) {  // each query head's scale joins its weight
          std::copy(q + h * d, q + (h + 1) * d, rotated.begin());
          HadamardRotate(rotated.data(), d);
          weights[h] *= QuantizeFp8Row(rotated.data(), d, q8.data() + h * d);
        }
        std::copy(keys.begin() + j * d, keys.begin() + (j + 1) * d, rotated.begin());
        HadamardRotate(rotated.data(), d);
        const float key_scale = QuantizeFp8Row(rotated.data(), d, k8.data());
        return key_scale * testing_util::WeightedReluSum(nh, d, weights.data(), [&](int64_t h) {
          float dot = 0.0f;
          for (int64_t p = 0; p < d / 2; ++p) dot = Bf16PairStep(dot, PairOf(q8.data() + h * d, p), PairOf(k8.data(), p));
          return dot;
        });
      });
}

// Against float64 scores of the f32 q and k (no rotation: it leaves exact dot products unchanged):
// each rotated value is rounded to e4m3 (2^-4 relative, or 2^-10 of its scale below e4m3's normal
// range), so a head's dot product is off by at most (2^-3 + 2^-8)·Σ|q'_t·k'_t| plus the subnormal
// terms, q', k' the rotated vectors; the score by the weighted sum of those.
TEST(IndexerFp8Test, ScoresAreWithinTheirRoundingBoundOfFloat64) {
  const RotaryEmbedding no_rope;
  IndexerDims dims;
  dims.n_heads = 16;
  dims.head_dim = 128;
  const int64_t nh = dims.n_heads, d = dims.head_dim, rows = 2, num_keys = 150;
  const std::vector<float> keys = Random(num_keys * d, 21, 0.3f);
  const Fp8Cache cache = ToFp8Cache(keys, num_keys, num_keys, d);
  const std::vector<float> q = Random(rows * nh * d, 22, 0.3f), head_weights = Random(rows * nh, 23, 0.0f);
  std::vector<float> q_work = q, w_work = head_weights, scores(rows * num_keys);
  const std::vector<int64_t> positions = {num_keys - 2, num_keys - 1};
  IndexerScoresFromProjections(dims, no_rope, q_work.data(), w_work.data(), rows, positions.data(), cache.data(),
                               cache.scales.data(), num_keys, scores.data());
  auto rotated = [&](const float* x) {
    std::vector<float> v(x, x + d);
    HadamardRotate(v.data(), d);
    return v;
  };
  double error_squares = 0.0, score_squares = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j <= positions[r]; ++j) {
      const std::vector<float> k = rotated(keys.data() + j * d);
      double exact = 0.0, bound = 0.0;
      for (int64_t h = 0; h < nh; ++h) {
        const std::vector<float> qh = rotated(q.data() + (r * nh + h) * d);
        double dot = 0.0, magnitude = 0.0, max_q = 0.0, max_k = 0.0;
        for (int64_t t = 0; t < d; ++t) {
          dot += static_cast<double>(q[(r * nh + h) * d + t]) * keys[j * d + t];
          magnitude += std::fabs(static_cast<double>(qh[t]) * k[t]);
          max_q = std::max(max_q, std::fabs(static_cast<double>(qh[t])));
          max_k = std::max(max_k, std::fabs(static_cast<double>(k[t])));
        }
        // Subnormal e4m3 values are off by up to 2^-10 of the scale (≤ max/448·2, so 2^-9·max/448).
        const double floor_q = 0x1p-9 * max_q / 448.0 * 2, floor_k = 0x1p-9 * max_k / 448.0 * 2;
        const double dot_error = (0x1p-3 + 0x1p-8) * magnitude + d * (floor_q * max_k + floor_k * max_q) +
                                 d * 0x1p-24 * magnitude;
        const double weight = head_weights[r * nh + h] / std::sqrt(static_cast<double>(nh));
        exact += weight * std::max(dot / std::sqrt(static_cast<double>(d)), 0.0);
        bound += std::fabs(weight) * dot_error / std::sqrt(static_cast<double>(d));
      }
      bound += 1e-6 * std::fabs(exact) + 1e-7;
      EXPECT_LE(std::fabs(scores[r * num_keys + j] - exact), bound) << "row " << r << " key " << j;
      error_squares += (scores[r * num_keys + j] - exact) * (scores[r * num_keys + j] - exact);
      score_squares += exact * exact;
    }
  }
  // The bound above is the worst case, where every rounding points the same way. Over these (fixed)
  // random vectors the roundings mostly cancel: the RMS error is about 5% of the RMS score (each e4m3
  // rounding is about 2^-5 of its value, RMS), where a query rotated differently from its keys gives
  // an error larger than the scores (130%).
  EXPECT_LT(std::sqrt(error_squares / score_squares), 0.08);
}

// KeepSlots moves e4m3 keys and their scales across blocks, bits unchanged.
TEST(IndexerFp8Test, KeepSlotsMovesFp8KeysAndScalesAcrossBlocks) {
  KvCacheShape shape;
  shape.kv_lora_rank = 4;
  shape.rope_dim = 2;
  shape.index_head_dim = 8;
  shape.index_key_storage = IndexKeyStorage::kFp8;
  shape.has_indexer = {true};
  const int64_t capacity = 200, d = shape.index_head_dim;
  KvCache cache(shape, capacity);
  LayerKvCache& layer = cache.layer(0);
  ASSERT_EQ(layer.index_key.dtype(), DType::kF8E4M3);
  ASSERT_EQ(layer.index_key_scale.numel(), capacity);
  auto key = [&](int64_t slot, int64_t t) { return static_cast<uint8_t>((7 * slot + t) & 0x7e); };
  for (int64_t j = 0; j < 150; ++j) {
    for (int64_t t = 0; t < d; ++t) layer.index_key.data<uint8_t>()[IndexKeyPairOffset(j, t, d)] = key(j, t);
    layer.index_key_scale.data<float>()[j] = static_cast<float>(j + 1);
  }
  cache.SetLength(150);
  const std::vector<int64_t> slots = {62, 70, 129, 149};  // kept at 60, 61, 62, 63
  ASSERT_TRUE(cache.KeepSlots(60, slots).ok());
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t source = j < 60 ? j : slots[j - 60];
    EXPECT_EQ(layer.index_key_scale.data<float>()[j], static_cast<float>(source + 1)) << "slot " << j;
    for (int64_t t = 0; t < d; ++t) {
      ASSERT_EQ(layer.index_key.data<uint8_t>()[IndexKeyPairOffset(j, t, d)], key(source, t)) << j << ", " << t;
    }
  }
  // One byte per indexer key value, plus the slot's f32 scale.
  KvCacheShape f32_shape = shape;
  f32_shape.index_key_storage = IndexKeyStorage::kF32;
  EXPECT_EQ(CacheBytesPerToken(f32_shape) - CacheBytesPerToken(shape), 4 * d - (d + 4));
  EXPECT_EQ(*ParseIndexKeyStorage("fp8", "--index-keys"), IndexKeyStorage::kFp8);
  EXPECT_STREQ(IndexKeyStorageName(IndexKeyStorage::kFp8), "fp8");
}

}  // namespace
}  // namespace mtpspec
