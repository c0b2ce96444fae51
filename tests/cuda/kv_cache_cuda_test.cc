// DeviceKvCache: the store (kv_a_layernorm + f32 or int8 with per-token scale) against
// LayerKvCache::StoreLatent after the CPU RmsNorm, truncation rules, bytes per token.
#include <cmath>
#include <random>
#include <vector>

#include "attention/kv_cache.h"
#include "attention/kv_cache_cuda.h"
#include "kernels/linear.h"
#include "gtest/gtest.h"
#include "tests/cuda/attention_cuda_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

KvCacheShape SmallShape(LatentStorage storage) {
  KvCacheShape shape;
  shape.latent_storage = storage;
  shape.kv_lora_rank = 40;
  shape.rope_dim = 8;
  shape.index_head_dim = 16;
  shape.has_indexer = {true, false};
  return shape;
}

TEST(KvCacheCuda, TruncateAndBytesMatchCpuRules) {
  MTPSPEC_REQUIRE_GPU();
  for (LatentStorage storage : {LatentStorage::kF32, LatentStorage::kInt8}) {
    auto cache = DeviceKvCache::Create(SmallShape(storage), 32);
    ASSERT_TRUE(cache.ok()) << cache.status();
    KvCache cpu(SmallShape(storage), 32);
    EXPECT_EQ((*cache)->BytesPerToken(), cpu.BytesPerToken());
    EXPECT_EQ((*cache)->layer(1).index_key, nullptr);
    EXPECT_NE((*cache)->layer(0).index_key, nullptr);
    EXPECT_EQ((*cache)->layer(0).int8(), storage == LatentStorage::kInt8);
    (*cache)->SetLength(10);
    const absl::Status too_long = (*cache)->Truncate(11);
    EXPECT_FALSE(too_long.ok());
    EXPECT_NE(std::string(too_long.message()).find("11"), std::string::npos);
    EXPECT_NE(std::string(too_long.message()).find("10"), std::string::npos);
    EXPECT_TRUE((*cache)->Truncate(4).ok());
    EXPECT_EQ((*cache)->length(), 4);
    EXPECT_FALSE((*cache)->Truncate(-1).ok());
  }
}

void CheckStore(LatentStorage storage) {
  auto ctx_or = Context::Create();
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();
  Context& ctx = **ctx_or;
  const KvCacheShape shape = SmallShape(storage);
  const int64_t r_kv = shape.kv_lora_rank, stride = r_kv + 8, rows = 6, first = 9, capacity = 32;
  auto cache = DeviceKvCache::Create(shape, capacity);
  ASSERT_TRUE(cache.ok()) << cache.status();
  KvCache cpu(shape, capacity);
  std::mt19937_64 rng(3);
  std::vector<float> kv = testing::RandomValues(rows * stride, 2.0f, rng);  // [rows, r_kv + 8]
  kv[3 * stride + 5] = 0.0f;
  for (int64_t i = 0; i < r_kv; ++i) kv[4 * stride + i] = 0.0f;  // an all-zero latent: scale 1
  const std::vector<float> weight = testing::RandomValues(r_kv, 1.0f, rng);
  std::vector<float> c(r_kv);
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(kv.data() + r * stride, weight.data(), r_kv, 1e-6, c.data());
    cpu.layer(0).StoreLatent(first + r, c.data());
  }
  DeviceArray<float> d_kv = ToDevice(kv, ctx);
  DeviceArray<float> d_weight = ToDevice(weight, ctx);
  ASSERT_TRUE(StoreLatents(ctx, (*cache)->layer(0), capacity, r_kv, d_kv.data(), stride, d_weight.data(), 1e-6, rows,
                           first)
                  .ok());
  EXPECT_FALSE(StoreLatents(ctx, (*cache)->layer(0), capacity, r_kv, d_kv.data(), stride, d_weight.data(), 1e-6, rows,
                            capacity - 2)
                   .ok());
  auto widened = DeviceArray<float>::Create(capacity * r_kv, "widened");
  ASSERT_TRUE(widened.ok());
  ASSERT_TRUE(LoadLatents(ctx, (*cache)->layer(0), r_kv, capacity, widened->data()).ok());
  const std::vector<float> got = ToHost(*widened, ctx);
  std::vector<float> expected(r_kv);
  for (int64_t j = 0; j < capacity; ++j) {
    cpu.layer(0).LoadLatent(j, expected.data());
    for (int64_t i = 0; i < r_kv; ++i) {
      // f32: the norm's sum order differs (≈1 ulp). int8: a value at a rounding boundary may move
      // by one step of the scale.
      const float scale = storage == LatentStorage::kInt8 ? cpu.layer(0).latent_scale.data<float>()[j] : 0.0f;
      EXPECT_NEAR(got[j * r_kv + i], expected[i], 1e-5f * (1.0f + std::fabs(expected[i])) + 1.001f * scale)
          << "slot " << j << " dim " << i;
    }
  }
  if (storage == LatentStorage::kInt8) {
    std::vector<float> scales(capacity);
    ASSERT_TRUE(FromCuda(cudaMemcpy(scales.data(), (*cache)->layer(0).latent_scale, capacity * 4,
                                    cudaMemcpyDeviceToHost), "scales").ok());
    for (int64_t j = 0; j < capacity; ++j) {
      const float want = cpu.layer(0).latent_scale.data<float>()[j];
      EXPECT_NEAR(scales[j], want, 1e-5f * std::fabs(want)) << "slot " << j;
    }
    EXPECT_EQ(scales[first + 4], 1.0f);  // all-zero latent
  }
}

TEST(KvCacheCuda, StoreF32MatchesCpu) {
  MTPSPEC_REQUIRE_GPU();
  CheckStore(LatentStorage::kF32);
}

TEST(KvCacheCuda, StoreInt8MatchesCpu) {
  MTPSPEC_REQUIRE_GPU();
  CheckStore(LatentStorage::kInt8);
}

}  // namespace
}  // namespace mtpspec::cuda
