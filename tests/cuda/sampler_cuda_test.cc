// verify/sampler_cuda against the CPU sampler (verify/sampler.h) and the device Philox against the
// Random123 known answers and core/philox.h's UniformAt.
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/philox.h"
#include "tests/cuda/cuda_test_util.h"
#include "verify/sampler.h"
#include "verify/sampler_cuda.h"

namespace mtpspec::cuda {
namespace {

// rows × vocab logits ~ N(0, 3²); with `ties`, rounded to quarters so many entries tie exactly.
std::vector<float> RandomLogits(int64_t rows, int64_t vocab, uint32_t seed, bool ties) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& v : logits) {
    v = dist(gen);
    if (ties) v = std::round(v * 4.0f) / 4.0f;
  }
  return logits;
}

TEST(PhiloxCuda, MatchesRandom123KnownAnswers) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const std::vector<std::array<uint32_t, 4>> counters = {
      {0, 0, 0, 0}, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
  const std::vector<std::array<uint32_t, 2>> keys = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
  auto out = Philox4x32Cuda(**ctx, counters, keys);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0], (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ((*out)[1], (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ((*out)[2], (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxCuda, UniformsEqualCpuUniformAt) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::vector<uint64_t> positions;
  for (uint64_t p = 0; p < 2000; ++p) positions.push_back(p);
  positions.push_back(uint64_t{1} << 32);
  positions.push_back((uint64_t{1} << 40) + 12345);
  positions.push_back(~uint64_t{0});
  for (const uint64_t seed : {uint64_t{0}, uint64_t{42}, (uint64_t{7} << 36) + 3}) {
    for (const uint32_t stream : {0u, 1u, 3u}) {
      auto gpu = UniformAtCuda(**ctx, seed, positions, stream);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      for (size_t i = 0; i < positions.size(); ++i) {
        ASSERT_EQ((*gpu)[i], UniformAt(seed, positions[i], stream)) << "seed " << seed << " position " << positions[i];
      }
    }
  }
}

TEST(SamplerCuda, ArgmaxMatchesCpuWithTiesToTheLowestIndex) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const int64_t vocab : {1, 7, 1000, 40000}) {
    const int64_t rows = 12;
    std::vector<float> logits = RandomLogits(rows, vocab, 3 + static_cast<uint32_t>(vocab), true);
    // Row 0: every entry equal; row 1: the maximum twice, far apart.
    for (int64_t i = 0; i < vocab; ++i) logits[i] = 1.5f;
    if (vocab > 2) {
      logits[vocab + vocab - 1] = 100.0f;
      logits[vocab + 1] = 100.0f;
    }
    DeviceArray<float> d = ToDevice(logits, **ctx);
    auto gpu = ArgmaxCuda(**ctx, d.data(), rows, vocab);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ((*gpu)[r], Argmax(logits.data() + r * vocab, vocab)) << r;
  }
}

TEST(SamplerCuda, DrawsEqualCpuSampleToken) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  struct Filter {
    int64_t top_k;
    double top_p, min_p;
  };
  const Filter filters[] = {{0, 1.0, 0.0}, {50, 1.0, 0.0}, {1, 1.0, 0.0},   {0, 0.9, 0.0},
                            {0, 1.0, 0.05}, {40, 0.8, 0.02}, {0, 0.5, 0.1}, {3000, 0.95, 0.0}};
  int64_t compared = 0;
  for (const int64_t vocab : {1000, 40000}) {
    for (const bool ties : {false, true}) {
      const int64_t rows = 16;
      const std::vector<float> logits = RandomLogits(rows, vocab, 17 + static_cast<uint32_t>(vocab) + ties, ties);
      DeviceArray<float> d = ToDevice(logits, **ctx);
      for (const double temperature : {0.0, 0.7, 1.0}) {
        for (const Filter& f : filters) {
          for (const uint64_t seed : {uint64_t{0}, uint64_t{1234}, (uint64_t{1} << 40) + 7}) {
            SamplingParams params;
            params.temperature = temperature;
            params.top_k = f.top_k;
            params.top_p = f.top_p;
            params.min_p = f.min_p;
            params.seed = seed;
            std::vector<int64_t> positions(rows);
            for (int64_t r = 0; r < rows; ++r) positions[r] = r * 977 + static_cast<int64_t>(seed % 13) + (r == 5 ? (int64_t{1} << 33) : 0);
            auto gpu = SampleTokensCuda(**ctx, d.data(), rows, vocab, params, positions.data());
            ASSERT_TRUE(gpu.ok()) << gpu.status();
            ASSERT_EQ(gpu->size(), static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
              EXPECT_EQ((*gpu)[r], SampleToken(logits.data() + r * vocab, vocab, params, positions[r]))
                  << "V " << vocab << " ties " << ties << " T " << temperature << " top_k " << f.top_k << " top_p "
                  << f.top_p << " min_p " << f.min_p << " seed " << seed << " row " << r;
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 4000);
}

TEST(SamplerCuda, RowsAreIndependentOfTheBlock) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t rows = 9, vocab = 5000;
  const std::vector<float> logits = RandomLogits(rows, vocab, 99, false);
  DeviceArray<float> d = ToDevice(logits, **ctx);
  SamplingParams params;
  params.temperature = 1.0;
  params.top_p = 0.9;
  params.seed = 5;
  std::vector<int64_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = 100 + r;
  auto block = SampleTokensCuda(**ctx, d.data(), rows, vocab, params, positions.data());
  ASSERT_TRUE(block.ok()) << block.status();
  for (int64_t r = 0; r < rows; ++r) {
    auto alone = SampleTokensCuda(**ctx, d.data() + r * vocab, 1, vocab, params, positions.data() + r);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ((*alone)[0], (*block)[r]) << r;
  }
}

TEST(SamplerCuda, RejectsInvalidParams) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  DeviceArray<float> d = ToDevice(RandomLogits(1, 10, 1, false), **ctx);
  SamplingParams params;
  params.temperature = 1.0;
  params.top_p = 0.0;
  const int64_t position = 0;
  EXPECT_EQ(SampleTokensCuda(**ctx, d.data(), 1, 10, params, &position).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtpspec::cuda
