// The lightning indexer's scores over its blocked key cache (attention/indexer.h), and the cache's
// handling of those blocks.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attention/indexer.h"
#include "attention/kv_cache.h"
#include "attention/rope.h"
#include "gtest/gtest.h"
#include "kernels/bf16_pairs.h"

namespace mtpspec {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

// keys: [num_keys, d] → the cache's transposed blocks, [IndexKeyBlocks(capacity), d, 64].
std::vector<float> ToBlocks(const std::vector<float>& keys, int64_t num_keys, int64_t capacity, int64_t d) {
  std::vector<float> cache(IndexKeyBlocks(capacity) * d * kIndexKeyBlock, std::nanf(""));
  for (int64_t j = 0; j < num_keys; ++j) {
    for (int64_t t = 0; t < d; ++t) cache[IndexKeyOffset(j, t, d)] = keys[j * d + t];
  }
  return cache;
}

// keys: [num_keys, d] → a bf16 cache's blocks of pairs, [IndexKeyBlocks(capacity), d, 64] bf16, the
// unused slots NaN. Written element by element through IndexKeyPairOffset, not WriteIndexKey.
std::vector<uint16_t> ToBf16Blocks(const std::vector<float>& keys, int64_t num_keys, int64_t capacity, int64_t d) {
  std::vector<uint16_t> cache(IndexKeyBlocks(capacity) * d * kIndexKeyBlock, F32ToBf16(std::nanf("")));
  for (int64_t j = 0; j < num_keys; ++j) {
    for (int64_t t = 0; t < d; ++t) cache[IndexKeyPairOffset(j, t, d)] = F32ToBf16(keys[j * d + t]);
  }
  return cache;
}

// Scores every key count around the 64-slot blocks with 1-3 rows, together and each row alone, and
// holds every score bit for bit to Σ_h w_h · N_I^-½ · ReLU(dot(q_h, k_j) · d_I^-½) for j ≤ positions[r],
// −∞ past it, each head's term one multiply-add onto the sum over the heads before it. `make_cache`
// lays keys [num_keys, d] out as the cache of num_keys + 5 slots (NaN past the last key, so a read
// past the end would show); `dot` is the chain one head's dot product must be.
template <typename MakeCache, typename Dot>
void CheckScoresBitForBit(const MakeCache& make_cache, const Dot& dot) {
  const RotaryEmbedding no_rope;  // rotary_dim 0: the queries stay as given
  for (int64_t d : {16, 128}) {
    for (int64_t num_keys : {1, 63, 64, 65, 200, 300}) {
      IndexerDims dims;
      dims.n_heads = 8;
      dims.head_dim = d;
      const int64_t nh = dims.n_heads, rows = std::min<int64_t>(3, num_keys);
      const std::vector<float> keys = Random(num_keys * d, static_cast<uint32_t>(num_keys + d));
      const auto cache = make_cache(keys, num_keys, num_keys + 5, d);
      const std::vector<float> q = Random(rows * nh * d, 7), head_weights = Random(rows * nh, 8);
      std::vector<int64_t> positions(rows);
      for (int64_t r = 0; r < rows; ++r) positions[r] = num_keys - rows + r;

      std::vector<float> q_all = q, w_all = head_weights, together(rows * num_keys);
      IndexerScoresFromProjections(dims, no_rope, q_all.data(), w_all.data(), rows, positions.data(), cache.data(),
                                   num_keys, together.data());
      const float head_scale = 1.0f / std::sqrt(static_cast<float>(nh));
      const float dot_scale = 1.0f / std::sqrt(static_cast<float>(d));
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> q_one(q.begin() + r * nh * d, q.begin() + (r + 1) * nh * d);
        std::vector<float> w_one(head_weights.begin() + r * nh, head_weights.begin() + (r + 1) * nh);
        std::vector<float> alone(num_keys);
        IndexerScoresFromProjections(dims, no_rope, q_one.data(), w_one.data(), 1, &positions[r], cache.data(), num_keys,
                                     alone.data());
        for (int64_t j = 0; j < num_keys; ++j) {
          float expected = -std::numeric_limits<float>::infinity();
          if (j <= positions[r]) {
            expected = 0.0f;
            for (int64_t h = 0; h < nh; ++h) {
              const float head_dot = dot(q.data() + (r * nh + h) * d, keys.data() + j * d, d);
              expected = std::fma(head_weights[r * nh + h] * head_scale, std::max(head_dot * dot_scale, 0.0f), expected);
            }
          }
          ASSERT_EQ(std::bit_cast<uint32_t>(together[r * num_keys + j]), std::bit_cast<uint32_t>(expected))
              << "d " << d << " keys " << num_keys << " row " << r << " key " << j;
          ASSERT_EQ(std::bit_cast<uint32_t>(alone[j]), std::bit_cast<uint32_t>(expected))
              << "alone: d " << d << " keys " << num_keys << " row " << r << " key " << j;
        }
      }
    }
  }
}

// f32 keys: each head's dot product is one multiply-add chain over the d_I elements in order.
TEST(IndexerScoresTest, EachScoreIsOneMultiplyAddChainPerHeadOverBlockedKeys) {
  CheckScoresBitForBit(ToBlocks, [](const float* q, const float* k, int64_t d) {
    float dot = 0.0f;
    for (int64_t t = 0; t < d; ++t) dot = std::fma(q[t], k[t], dot);
    return dot;
  });
}

// KeepSlots moves a kept slot's indexer key, element by element across its transposed block, with
// its latent and rope key; the slots it does not touch keep theirs.
TEST(IndexerScoresTest, KeepSlotsMovesIndexKeysAcrossBlocks) {
  KvCacheShape shape;
  shape.kv_lora_rank = 4;
  shape.rope_dim = 2;
  shape.index_head_dim = 5;
  shape.has_indexer = {true};
  const int64_t capacity = 200, d = shape.index_head_dim;
  KvCache cache(shape, capacity);
  LayerKvCache& layer = cache.layer(0);
  ASSERT_EQ(layer.index_key.numel(), IndexKeyBlocks(capacity) * d * kIndexKeyBlock);
  auto key = [&](int64_t slot, int64_t t) { return static_cast<float>(1000 * slot + t); };
  for (int64_t j = 0; j < 150; ++j) {
    for (int64_t t = 0; t < d; ++t) layer.index_key.data<float>()[IndexKeyOffset(j, t, d)] = key(j, t);
  }
  cache.SetLength(150);
  const std::vector<int64_t> slots = {62, 70, 129, 149};  // kept at 60, 61, 62, 63
  ASSERT_TRUE(cache.KeepSlots(60, slots).ok());
  EXPECT_EQ(cache.length(), 64);
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t source = j < 60 ? j : slots[j - 60];
    for (int64_t t = 0; t < d; ++t) {
      ASSERT_EQ(layer.index_key.data<float>()[IndexKeyOffset(j, t, d)], key(source, t)) << "slot " << j << " t " << t;
    }
  }
}

TEST(IndexerScoresTest, Bf16OffsetsPairElementsOfOneSlotAndCoverEachBlockOnce) {
  for (int64_t d : {2, 16, 128}) {
    std::vector<int> hits(2 * d * kIndexKeyBlock, 0);
    for (int64_t slot = 0; slot < 2 * kIndexKeyBlock; ++slot) {
      for (int64_t t = 0; t < d; ++t) {
        const int64_t at = IndexKeyPairOffset(slot, t, d);
        ASSERT_LT(at, static_cast<int64_t>(hits.size()));
        ++hits[at];
        // The pair (2p, 2p + 1) of a slot is one 32-bit word: low half, then high half.
        if (t % 2 == 1) ASSERT_EQ(at, IndexKeyPairOffset(slot, t - 1, d) + 1);
        // Pair p of the 64 slots of a block is one row of 64 words.
        ASSERT_EQ(at / 2, (slot / kIndexKeyBlock) * (d / 2) * kIndexKeyBlock + (t / 2) * kIndexKeyBlock +
                              slot % kIndexKeyBlock);
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

// bf16 keys: each head's dot product is one chain of bf16 pair steps over bf16(q) and bf16(k)
// (kernels/bf16_pairs.h); the ReLU and the weighted head sum are as in f32.
TEST(IndexerScoresTest, Bf16KeysGiveOnePairChainPerHeadOverBlockedKeys) {
  CheckScoresBitForBit(ToBf16Blocks, [](const float* q, const float* k, int64_t d) {
    float dot = 0.0f;
    for (int64_t p = 0; p < d / 2; ++p) {
      dot = Bf16PairStep(dot, PackBf16Pair(q[2 * p], q[2 * p + 1]), PackBf16Pair(k[2 * p], k[2 * p + 1]));
    }
    return dot;
  });
}

// The bf16 scores against float64 scores of the f32 q and k: each dot product is off by the rounding
// of q and k to bf16 (2^-8 relative each) and the chain's sums, so |Δdot| ≤ (2^-7 + 2^-16 + d·2^-24)
// · Σ|q_t·k_t|, and a score, a positive combination of ReLUs of the dots, by the weighted sum of those.
TEST(IndexerScoresTest, Bf16ScoresAreWithinTheirRoundingBoundOfFloat64) {
  const RotaryEmbedding no_rope;
  IndexerDims dims;
  dims.n_heads = 16;
  dims.head_dim = 128;
  const int64_t nh = dims.n_heads, d = dims.head_dim, rows = 2, num_keys = 150;
  const std::vector<float> keys = Random(num_keys * d, 21);
  const std::vector<uint16_t> cache = ToBf16Blocks(keys, num_keys, num_keys, d);
  const std::vector<float> q = Random(rows * nh * d, 22), head_weights = Random(rows * nh, 23);
  std::vector<float> q_work = q, w_work = head_weights, scores(rows * num_keys);
  const std::vector<int64_t> positions = {num_keys - 2, num_keys - 1};
  IndexerScoresFromProjections(dims, no_rope, q_work.data(), w_work.data(), rows, positions.data(), cache.data(),
                               num_keys, scores.data());
  const double dot_bound = 0x1p-7 + 0x1p-16 + static_cast<double>(d) * 0x1p-24;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j <= positions[r]; ++j) {
      double exact = 0.0, bound = 0.0;
      for (int64_t h = 0; h < nh; ++h) {
        double dot = 0.0, magnitude = 0.0;
        for (int64_t t = 0; t < d; ++t) {
          dot += static_cast<double>(q[(r * nh + h) * d + t]) * keys[j * d + t];
          magnitude += std::fabs(static_cast<double>(q[(r * nh + h) * d + t]) * keys[j * d + t]);
        }
        const double weight = head_weights[r * nh + h] / std::sqrt(static_cast<double>(nh));
        exact += weight * std::max(dot / std::sqrt(static_cast<double>(d)), 0.0);
        bound += std::fabs(weight) * dot_bound * magnitude / std::sqrt(static_cast<double>(d));
      }
      bound += 1e-6 * std::fabs(exact) + 1e-7;  // the f32 scaling and head sum
      EXPECT_LE(std::fabs(scores[r * num_keys + j] - exact), bound) << "row " << r << " key " << j;
    }
  }
}

// KeepSlots moves bf16 keys too, across blocks, bits unchanged.
TEST(IndexerScoresTest, KeepSlotsMovesBf16IndexKeysAcrossBlocks) {
  KvCacheShape shape;
  shape.kv_lora_rank = 4;
  shape.rope_dim = 2;
  shape.index_head_dim = 6;
  shape.index_key_storage = IndexKeyStorage::kBf16;
  shape.has_indexer = {true};
  const int64_t capacity = 200, d = shape.index_head_dim;
  KvCache cache(shape, capacity);
  LayerKvCache& layer = cache.layer(0);
  ASSERT_EQ(layer.index_key.dtype(), DType::kBF16);
  ASSERT_EQ(layer.index_key.numel(), IndexKeyBlocks(capacity) * d * kIndexKeyBlock);
  auto key = [&](int64_t slot, int64_t t) { return static_cast<uint16_t>(0x3f80 + 8 * slot + t); };
  for (int64_t j = 0; j < 150; ++j) {
    for (int64_t t = 0; t < d; ++t) layer.index_key.data<uint16_t>()[IndexKeyPairOffset(j, t, d)] = key(j, t);
  }
  cache.SetLength(150);
  const std::vector<int64_t> slots = {62, 70, 129, 149};  // kept at 60, 61, 62, 63
  ASSERT_TRUE(cache.KeepSlots(60, slots).ok());
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t source = j < 60 ? j : slots[j - 60];
    for (int64_t t = 0; t < d; ++t) {
      ASSERT_EQ(layer.index_key.data<uint16_t>()[IndexKeyPairOffset(j, t, d)], key(source, t))
          << "slot " << j << " t " << t;
    }
  }
  // Two bytes per indexer key value.
  KvCacheShape f32_shape = shape;
  f32_shape.index_key_storage = IndexKeyStorage::kF32;
  EXPECT_EQ(CacheBytesPerToken(f32_shape) - CacheBytesPerToken(shape), 2 * d);
}

TEST(IndexerScoresTest, IndexKeyStorageParsesAndNamesTheFlagOnError) {
  EXPECT_EQ(*ParseIndexKeyStorage("f32", "--index-keys"), IndexKeyStorage::kF32);
  EXPECT_EQ(*ParseIndexKeyStorage("bf16", "--index-keys"), IndexKeyStorage::kBf16);
  const auto bad = ParseIndexKeyStorage("int4", "--index-keys");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--index-keys"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace mtpspec
