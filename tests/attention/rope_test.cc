// RoPE invariants and the YaRN numbers of DeepSeek-V3.2 (docs/models.md, "RoPE", "Pitfalls").
#include "attention/rope.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

std::vector<float> RandomVector(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

RopeConfig DeepSeekV32Yarn() {
  RopeConfig c;
  c.theta = 10000;
  c.type = "yarn";
  c.factor = 40;
  c.original_max_position_embeddings = 4096;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.mscale = 1.0;
  c.mscale_all_dim = 1.0;
  return c;
}

class RopeStyleTest : public ::testing::TestWithParam<RopeStyle> {};

// ⟨R_m q, R_n k⟩ depends only on m − n.
TEST_P(RopeStyleTest, DotProductDependsOnlyOnRelativePosition) {
  RopeConfig config;
  config.theta = 10000;
  RotaryEmbedding rope(config, 64);
  const auto q = RandomVector(64, 1), k = RandomVector(64, 2);
  double reference = 0;
  for (int shift : {0, 1, 17, 1000}) {
    auto qs = q, ks = k;
    rope.Apply(qs.data(), 40 + shift, GetParam());
    rope.Apply(ks.data(), 33 + shift, GetParam());
    const double d = Dot(qs, ks);
    if (shift == 0) {
      reference = d;
    } else {
      EXPECT_NEAR(d, reference, 2e-3 * std::abs(reference) + 1e-3) << "shift " << shift;
    }
  }
}

TEST_P(RopeStyleTest, PreservesNorm) {
  RopeConfig config;
  RotaryEmbedding rope(config, 16);
  auto v = RandomVector(16, 3);
  const double before = Dot(v, v);
  rope.Apply(v.data(), 123, GetParam());
  EXPECT_NEAR(Dot(v, v), before, 1e-4 * before);
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeStyleTest, ::testing::Values(RopeStyle::kInterleaved, RopeStyle::kHalfSplit));

// interleaved(x) = P⁻¹ · halfsplit(P · x), with P the even/odd de-interleave permutation.
TEST(RopeTest, InterleavedEqualsPermutedHalfSplit) {
  RopeConfig config;
  config.theta = 1e6;
  RotaryEmbedding rope(config, 8);
  const auto x = RandomVector(8, 4);
  auto interleaved = x;
  rope.Apply(interleaved.data(), 37, RopeStyle::kInterleaved);
  std::vector<float> permuted(8);
  for (int i = 0; i < 4; ++i) {
    permuted[i] = x[2 * i];
    permuted[i + 4] = x[2 * i + 1];
  }
  rope.Apply(permuted.data(), 37, RopeStyle::kHalfSplit);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(interleaved[2 * i], permuted[i]);
    EXPECT_FLOAT_EQ(interleaved[2 * i + 1], permuted[i + 4]);
  }
}

TEST(RopeTest, StylesDifferOnTheSameInput) {
  RopeConfig config;
  RotaryEmbedding rope(config, 8);
  auto a = RandomVector(8, 5), b = a;
  rope.Apply(a.data(), 5, RopeStyle::kInterleaved);
  rope.Apply(b.data(), 5, RopeStyle::kHalfSplit);
  double diff = 0;
  for (int i = 0; i < 8; ++i) diff += std::abs(a[i] - b[i]);
  EXPECT_GT(diff, 1e-2);
}

// DeepSeek-V3.2: lo/hi = 10/23, low-frequency pairs interpolated by 1/40, attention factor 1.
TEST(RopeTest, DeepSeekV32YarnFrequencies) {
  RotaryEmbedding rope(DeepSeekV32Yarn(), 64);
  ASSERT_EQ(rope.inv_freq().size(), 32u);
  EXPECT_FLOAT_EQ(rope.attention_factor(), 1.0f);
  for (int i = 0; i < 32; ++i) {
    const double theta = std::pow(10000.0, -2.0 * i / 64.0);
    const double ramp = std::clamp((i - 10.0) / (23.0 - 10.0), 0.0, 1.0);
    const double expected = theta / 40.0 * ramp + theta * (1 - ramp);
    EXPECT_NEAR(rope.inv_freq()[i], expected, 1e-6 * expected) << "pair " << i;
  }
}

TEST(RopeTest, PlainRopeUsesBaseFrequencies) {
  RopeConfig config;
  config.theta = 8e6;
  RotaryEmbedding rope(config, 64);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(rope.inv_freq()[i], std::pow(8e6, -2.0 * i / 64.0), 1e-6 * std::pow(8e6, -2.0 * i / 64.0));
  }
}

}  // namespace
}  // namespace mtpspec
