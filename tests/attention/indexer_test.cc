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
#include "tests/attention/indexer_test_util.h"

namespace mtpspec {
namespace {

using testing_util::CheckScoresBitForBit;
using testing_util::WeightedReluSum;

std::vector<float> Random(int64_t n, uint32_t seed) { return testing_util::RandomFloats(n, seed); }

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

const RotaryEmbedding kNoRope;  // rotary_dim 0: the queries stay as given

// f32 keys: each head's dot product is one multiply-add chain over the d_I elements in order.
TEST(IndexerScoresTest, EachScoreIsOneMultiplyAddChainPerHeadOverBlockedKeys) {
  CheckScoresBitForBit(
      [](const IndexerDims& dims, const std::vector<float>& keys, int64_t num_keys, float* q, float* w, int64_t rows,
         const int64_t* positions, float* out) {
        const std::vector<float> cache = ToBlocks(keys, num_keys, num_keys + 5, dims.head_dim);
        IndexerScoresFromProjections(dims, kNoRope, q, w, rows, positions, cache.data(), num_keys, out);
      },
      [](const IndexerDims& dims, const float* q, const float* w, const std::vector<float>& keys, int64_t j) {
        const int64_t d = dims.head_dim;
        const std::vector<float> weights = testing_util::ScaledHeadWeights(dims, w);
        return WeightedReluSum(dims.n_heads, d, weights.data(), [&](int64_t h) {
          float dot = 0.0f;
          for (int64_t t = 0; t < d; ++t) dot = std::fma(q[h * d + t], keys[j * d + t], dot);
          return dot;
        });
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
        if (t % 2 == 1) {
          ASSERT_EQ(at, IndexKeyPairOffset(slot, t - 1, d) + 1);
        }
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
  CheckScoresBitForBit(
      [](const IndexerDims& dims, const std::vector<float>& keys, int64_t num_keys, float* q, float* w, int64_t rows,
         const int64_t* positions, float* out) {
        const std::vector<uint16_t> cache = ToBf16Blocks(keys, num_keys, num_keys + 5, dims.head_dim);
        IndexerScoresFromProjections(dims, kNoRope, q, w, rows, positions, cache.data(), num_keys, out);
      },
      [](const IndexerDims& dims, const float* q, const float* w, const std::vector<float>& keys, int64_t j) {
        const int64_t d = dims.head_dim;
        const float* k = keys.data() + j * d;
        const std::vector<float> weights = testing_util::ScaledHeadWeights(dims, w);
        return WeightedReluSum(dims.n_heads, d, weights.data(), [&](int64_t h) {
          float dot = 0.0f;
          for (int64_t p = 0; p < d / 2; ++p) {
            dot = Bf16PairStep(dot, PackBf16Pair(q[h * d + 2 * p], q[h * d + 2 * p + 1]),
                               PackBf16Pair(k[2 * p], k[2 * p + 1]));
          }
          return dot;
        });
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
