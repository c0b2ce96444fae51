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

// Score I[r, j] = Σ_h w_h · N_I^-½ · ReLU(q_h · k_j · d_I^-½) for j ≤ positions[r], −∞ past it: each
// head's dot product one multiply-add chain over the d_I elements in order, each head's term one
// multiply-add onto the sum over the heads before it. Exactly, for every key count around the
// 64-slot blocks, every row count, and rows scored alone or together. The slots past the last key
// hold NaN, so a read past the end would show.
TEST(IndexerScoresTest, EachScoreIsOneMultiplyAddChainPerHeadOverBlockedKeys) {
  const RotaryEmbedding no_rope;  // rotary_dim 0: the queries stay as given
  for (int64_t d : {16, 128}) {
    for (int64_t num_keys : {1, 63, 64, 65, 200, 300}) {
      IndexerDims dims;
      dims.n_heads = 8;
      dims.head_dim = d;
      const int64_t nh = dims.n_heads, rows = std::min<int64_t>(3, num_keys);
      const std::vector<float> keys = Random(num_keys * d, static_cast<uint32_t>(num_keys + d));
      const std::vector<float> cache = ToBlocks(keys, num_keys, num_keys + 5, d);
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
              float dot = 0.0f;
              for (int64_t t = 0; t < d; ++t) dot = std::fma(q[(r * nh + h) * d + t], keys[j * d + t], dot);
              expected = std::fma(head_weights[r * nh + h] * head_scale, std::max(dot * dot_scale, 0.0f), expected);
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

}  // namespace
}  // namespace mtpspec
