// The fp8 latent cache (LatentStorage::kFp8) and the bf16 attention over it (attention/mla_bf16.h):
// the stored layout against the served format's definition, the quantisation against an independent
// nearest-code search, and the attention against a float64 evaluation of the same arithmetic and,
// bit for bit, against the scalar chain of bf16 pair steps.
#include "attention/mla_bf16.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/kv_cache.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/bf16_pairs.h"
#include "kernels/linear.h"

namespace mtpspec {
namespace {

KvCacheShape Fp8Shape(int64_t r_kv, int64_t d_r, int64_t layers = 1) {
  KvCacheShape shape;
  shape.latent_storage = LatentStorage::kFp8;
  shape.kv_lora_rank = r_kv;
  shape.rope_dim = d_r;
  shape.index_head_dim = 16;
  shape.has_indexer.assign(layers, false);
  return shape;
}

// Every finite e4m3 value, for the nearest-code search.
std::vector<double> E4m3Values() {
  std::vector<double> values(256);
  for (int b = 0; b < 256; ++b) values[b] = (b & 0x7f) == 0x7f ? NAN : F8E4M3ToF32(static_cast<uint8_t>(b));
  return values;
}

// Fills slots [0, n) with latents of a few magnitudes per tile (one tile all zeros) and rope keys.
void Fill(LayerKvCache& layer, int64_t n, std::mt19937& rng, std::vector<std::vector<float>>* latents = nullptr) {
  std::normal_distribution<float> unit(0.0f, 1.0f);
  const int64_t r_kv = layer.latent_dim(), d_r = layer.rope_dim();
  for (int64_t j = 0; j < n; ++j) {
    std::vector<float> c(r_kv), k(d_r);  // [r_kv], [d_r]
    for (int64_t i = 0; i < r_kv; ++i) {
      const int64_t tile = i / kLatentFp8Tile;
      c[i] = tile == 1 && j % 5 == 0 ? 0.0f : unit(rng) * std::ldexp(1.0f, static_cast<int>(tile) * 3 - 4);
    }
    for (float& v : k) v = unit(rng);
    layer.StoreLatent(j, c.data());
    layer.StoreRopeKey(j, k.data());
    if (latents) latents->push_back(c);
  }
}

TEST(Fp8LatentCacheTest, TakesTheServedBytesPerToken) {
  // DeepSeek-V3.2's dimensions: 512 e4m3 values, 4 f32 scales and 64 bf16 rope values: 656 bytes.
  KvCacheShape shape = Fp8Shape(512, 64, 3);
  shape.has_indexer = {true, false, true};
  shape.index_head_dim = 128;
  EXPECT_EQ(CacheBytesPerToken(shape), 3 * 656 + 2 * 128 * 4);
  shape.index_key_storage = IndexKeyStorage::kFp8;
  EXPECT_EQ(CacheBytesPerToken(shape), 3 * 656 + 2 * (128 + 4));
  KvCache cache(Fp8Shape(200, 6), 3);  // a partial last tile: 2 scales
  EXPECT_EQ(cache.BytesPerToken(), 200 + 2 * 4 + 6 * 2);
  EXPECT_EQ(cache.layer(0).latent_scale.dim(1), 2);
  EXPECT_EQ(cache.layer(0).rope_key.dtype(), DType::kBF16);
}

TEST(Fp8LatentCacheTest, TileScaleIsThePowerOfTwoAtOrAboveTheServedBound) {
  for (float max_abs : {0.0f, 1e-9f, 0.0448f, 0.04480001f, 1.0f, 448.0f, 449.0f, 896.0f, 3.0e5f, 1.7e38f}) {
    const double bound = std::max(static_cast<double>(max_abs / 448.0f), static_cast<double>(1e-4f));
    const float scale = Fp8CacheTileScale(max_abs);
    int exponent = 0;
    EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << max_abs;  // a power of two
    EXPECT_GE(scale, bound) << max_abs;
    EXPECT_LT(scale / 2.0, bound) << max_abs;
  }
}

TEST(Fp8LatentCacheTest, StoresTheNearestCodeAndReadsBackExactly) {
  const std::vector<double> values = E4m3Values();
  KvCache cache(Fp8Shape(300, 10), 8);
  LayerKvCache& layer = cache.layer(0);
  std::mt19937 rng(3);
  std::vector<std::vector<float>> latents;
  Fill(layer, 8, rng, &latents);
  const int64_t tiles = layer.latent_scale.dim(1);
  std::vector<float> back(300);
  for (int64_t j = 0; j < 8; ++j) {
    layer.LoadLatent(j, back.data());
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t begin = t * kLatentFp8Tile, end = std::min<int64_t>(300, begin + kLatentFp8Tile);
      float max_abs = 0.0f;
      for (int64_t i = begin; i < end; ++i) max_abs = std::max(max_abs, std::fabs(latents[j][i]));
      const float scale = layer.latent_scale.data<float>()[j * tiles + t];
      EXPECT_EQ(scale, Fp8CacheTileScale(max_abs));
      for (int64_t i = begin; i < end; ++i) {
        const double x = static_cast<double>(latents[j][i]) / scale;
        double best = INFINITY;  // the distance to the nearest finite code
        for (double v : values) {
          if (!std::isnan(v)) best = std::min(best, std::fabs(v - x));
        }
        const uint8_t code = layer.latent.data<uint8_t>()[j * 300 + i];
        EXPECT_EQ(std::fabs(values[code] - x), best) << "slot " << j << " value " << i;
        EXPECT_EQ(back[i], static_cast<float>(values[code] * scale));
      }
    }
    std::vector<float> rope(10);
    layer.LoadRopeKey(j, rope.data());
    for (float v : rope) EXPECT_EQ(v, Bf16ToF32(F32ToBf16(v)));
  }
}

TEST(Fp8LatentCacheTest, KeepSlotsMovesCodesScalesAndRopeKeys) {
  KvCache cache(Fp8Shape(256, 8), 10);
  std::mt19937 rng(5);
  Fill(cache.layer(0), 10, rng);
  cache.SetLength(10);
  std::vector<float> want_latent(256), want_rope(8), got_latent(256), got_rope(8);
  cache.layer(0).LoadLatent(7, want_latent.data());
  cache.layer(0).LoadRopeKey(7, want_rope.data());
  const int64_t slots[] = {4, 7};
  ASSERT_TRUE(cache.KeepSlots(3, slots).ok());
  cache.layer(0).LoadLatent(4, got_latent.data());
  cache.layer(0).LoadRopeKey(4, got_rope.data());
  EXPECT_EQ(got_latent, want_latent);
  EXPECT_EQ(got_rope, want_rope);
  EXPECT_EQ(cache.length(), 5);
}

TEST(Fp8LatentCacheTest, StorageNamesAndRefusals) {
  EXPECT_EQ(*ParseLatentStorage("fp8", "--kv-cache"), LatentStorage::kFp8);
  EXPECT_STREQ(LatentStorageName(LatentStorage::kFp8), "fp8");
  const auto bad = ParseLatentStorage("fp4", "--kv-cache");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-cache must be f32, int8 or fp8, got \"fp4\""), std::string::npos);
  EXPECT_TRUE(CheckLatentStorage(LatentStorage::kFp8, 512, 64).ok());
  EXPECT_NE(CheckLatentStorage(LatentStorage::kFp8, 511, 64).message().find("kv_lora_rank"), std::string::npos);
  EXPECT_NE(CheckLatentStorage(LatentStorage::kFp8, 512, 63).message().find("qk_rope_head_dim"), std::string::npos);
  EXPECT_TRUE(CheckLatentStorage(LatentStorage::kInt8, 511, 63).ok());
}

struct AttentionCase {
  int64_t r_kv, d_r, heads, keys;
};

// z from AttendBf16Keys for keys = some slots of a filled cache, against (a) float64 arithmetic on
// the same bf16 operands (softmax weights rounded to bf16 as the kernel rounds them), and (b) bit for
// bit, the scalar chain of Bf16PairStep in the documented order (with the kernel's f32 softmax).
TEST(Bf16AttentionTest, MatchesTheScalarChainAndFloat64) {
  for (const AttentionCase& tc : {AttentionCase{64, 8, 3, 1}, AttentionCase{128, 16, 4, 37},
                                  AttentionCase{200, 6, 5, 33}, AttentionCase{512, 64, 2, 130}}) {
    const int64_t r_kv = tc.r_kv, d_r = tc.d_r, heads = tc.heads, capacity = 2 * tc.keys + 3;
    KvCache cache(Fp8Shape(r_kv, d_r), capacity);
    LayerKvCache& layer = cache.layer(0);
    std::mt19937 rng(static_cast<unsigned>(r_kv + tc.keys));
    Fill(layer, capacity, rng);
    std::vector<int32_t> keys(tc.keys);  // scattered slots, not in order
    for (int64_t k = 0; k < tc.keys; ++k) keys[k] = static_cast<int32_t>((k * 7 + 2) % capacity);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    const int64_t rope_stride = d_r + 3;
    std::vector<float> q_lat(heads * r_kv), q_rope(heads * rope_stride);  // [heads, r_kv], [heads, d_r + 3]
    for (float& v : q_lat) v = 0.2f * unit(rng);
    for (float& v : q_rope) v = 0.2f * unit(rng);
    const float scale = 0.3f;
    Bf16KeyBlock block;
    GatherBf16Keys(layer, keys, &block);
    std::vector<float> z(heads * r_kv);  // [heads, r_kv]
    AttendBf16Keys(q_lat.data(), q_rope.data(), rope_stride, heads, r_kv, d_r, scale, block, z.data());

    const int64_t n = tc.keys;
    std::vector<std::vector<float>> c(n, std::vector<float>(r_kv)), kr(n, std::vector<float>(d_r));
    for (int64_t k = 0; k < n; ++k) {
      layer.LoadLatent(keys[k], c[k].data());
      layer.LoadRopeKey(keys[k], kr[k].data());
    }
    auto bf16 = [](float v) { return Bf16ToF32(F32ToBf16(v)); };
    for (int64_t h = 0; h < heads; ++h) {
      // The query as pairs: [q_lat; q_rope], and each key as [c; k_r].
      std::vector<float> q(r_kv + d_r);
      for (int64_t i = 0; i < r_kv; ++i) q[i] = q_lat[h * r_kv + i];
      for (int64_t i = 0; i < d_r; ++i) q[r_kv + i] = q_rope[h * rope_stride + i];
      std::vector<double> s64(n);
      for (int64_t k = 0; k < n; ++k) {
        double acc64 = 0.0;
        for (int64_t p = 0; p < (r_kv + d_r) / 2; ++p) {
          auto key = [&](int64_t i) { return i < r_kv ? c[k][i] : kr[k][i - r_kv]; };
          acc64 += static_cast<double>(bf16(q[2 * p])) * key(2 * p) + static_cast<double>(bf16(q[2 * p + 1])) * key(2 * p + 1);
        }
        s64[k] = acc64 * scale;
      }
      // The softmax in float64.
      const double s64_max = *std::max_element(s64.begin(), s64.end());
      double sum64 = 0.0;
      std::vector<double> p64(n);
      for (int64_t k = 0; k < n; ++k) {
        p64[k] = std::exp(s64[k] - s64_max);
        sum64 += p64[k];
      }
      double max_error = 0.0, max_c = 0.0;
      for (int64_t i = 0; i < r_kv; ++i) {
        double want64 = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          want64 += static_cast<double>(bf16(static_cast<float>(p64[k] / sum64))) * c[k][i];
          max_c = std::max(max_c, std::fabs(static_cast<double>(c[k][i])));
        }
        max_error = std::max(max_error, std::fabs(z[h * r_kv + i] - want64));
      }
      // bf16 weights carry 2^-9 relative rounding; the f32 and float64 softmaxes may round a weight
      // to neighbouring bf16 values, so allow a few such steps against the largest latent.
      EXPECT_LE(max_error, 4.0 * 0x1p-8 * max_c) << "case r_kv " << r_kv << " keys " << n << " head " << h;
    }
    // Bit for bit: the kernel's own chain for every head, recomputed from its scores' definition.
    std::vector<float> z_chain(heads * r_kv);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> s(n);
      for (int64_t k = 0; k < n; ++k) {
        float acc = 0.0f;
        for (int64_t p = 0; p < r_kv / 2; ++p) {
          acc = Bf16PairStep(acc, PackBf16Pair(q_lat[h * r_kv + 2 * p], q_lat[h * r_kv + 2 * p + 1]),
                             PackBf16Pair(c[k][2 * p], c[k][2 * p + 1]));
        }
        for (int64_t p = 0; p < d_r / 2; ++p) {
          acc = Bf16PairStep(acc, PackBf16Pair(q_rope[h * rope_stride + 2 * p], q_rope[h * rope_stride + 2 * p + 1]),
                             PackBf16Pair(kr[k][2 * p], kr[k][2 * p + 1]));
        }
        s[k] = acc * scale;
      }
      SoftmaxInPlace(s.data(), n);  // the kernel's softmax (kernels/linear.h)
      for (int64_t i = 0; i < r_kv; ++i) {
        float acc = 0.0f;
        for (int64_t m = 0; 2 * m < n; ++m) {
          const float p_odd = 2 * m + 1 < n ? s[2 * m + 1] : 0.0f, c_odd = 2 * m + 1 < n ? c[2 * m + 1][i] : 0.0f;
          acc = Bf16PairStep(acc, PackBf16Pair(s[2 * m], p_odd), PackBf16Pair(c[2 * m][i], c_odd));
        }
        z_chain[h * r_kv + i] = acc;
      }
    }
    EXPECT_EQ(z, z_chain) << "case r_kv " << r_kv << " keys " << n;
  }
}

}  // namespace
}  // namespace mtpspec
