// DeviceRope against RotaryEmbedding::Apply (the CPU specification): both pairings, plain RoPE and
// YaRN, rotation of a sub-range (offset) of several vectors per row.
#include <cmath>
#include <random>
#include <vector>

#include "attention/rope.h"
#include "attention/rope_cuda.h"
#include "gtest/gtest.h"
#include "tests/cuda/attention_cuda_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

void CheckRope(const RopeConfig& config, RopeStyle style) {
  auto ctx_or = Context::Create();
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();
  Context& ctx = **ctx_or;
  constexpr int64_t kDim = 16, kRows = 5, kCount = 3, kVec = 24, kOffset = 6, kFirst = 90;
  RotaryEmbedding host(config, kDim);
  auto rope = DeviceRope::Create(host, 128);
  ASSERT_TRUE(rope.ok()) << rope.status();
  std::mt19937_64 rng(7);
  const std::vector<float> x = testing::RandomValues(kRows * kCount * kVec, 1.0f, rng);  // [rows, count, vec]
  std::vector<float> expected = x;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t v = 0; v < kCount; ++v) host.Apply(expected.data() + (r * kCount + v) * kVec + kOffset, kFirst + r, style);
  }
  DeviceArray<float> dx = ToDevice(x, ctx);
  ASSERT_TRUE(rope->Apply(ctx, dx.data(), kRows, kCount, kCount * kVec, kVec, kOffset, kFirst, style).ok());
  const std::vector<float> got = ToHost(dx, ctx);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 1e-6 * (1.0 + std::fabs(expected[i]))) << "element " << i;
  }
  // Past the tables: an error, not a silent clamp.
  EXPECT_FALSE(rope->Apply(ctx, dx.data(), kRows, kCount, kCount * kVec, kVec, kOffset, 125, style).ok());
}

TEST(RopeCuda, InterleavedPlainMatchesCpu) {
  MTPSPEC_REQUIRE_GPU();
  CheckRope(RopeConfig{}, RopeStyle::kInterleaved);
}

TEST(RopeCuda, HalfSplitYarnMatchesCpu) {
  MTPSPEC_REQUIRE_GPU();
  RopeConfig config;
  config.type = "yarn";
  config.factor = 40.0;
  config.original_max_position_embeddings = 64;
  config.mscale = 1.0;
  config.mscale_all_dim = 0.707;
  CheckRope(config, RopeStyle::kHalfSplit);
}

}  // namespace
}  // namespace mtpspec::cuda
