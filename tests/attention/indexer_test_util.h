// The exact-score check shared by the indexer's tests (indexer_test.cc, indexer_fp8_test.cc): one
// checker for every way the cache may hold its keys.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/indexer.h"
#include "gtest/gtest.h"
#include "tests/kernels/linear_test_util.h"

namespace mtpspec::testing_util {

// n values uniform in [-1, 1) from `seed`.
using linear_test::RandomFloats;

// The head weights w [N_I] times N_I^-½, as the indexer scales them.
inline std::vector<float> ScaledHeadWeights(const IndexerDims& dims, const float* w) {
  std::vector<float> weights(dims.n_heads);  // [N_I]
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(dims.n_heads));
  for (int64_t h = 0; h < dims.n_heads; ++h) weights[h] = w[h] * head_scale;
  return weights;
}

// Σ_h weights[h] · ReLU(dot(h) · d^-½), each head's term one multiply-add onto the sum over the heads
// before it: the order every score is summed in. weights: [n_heads], with every factor already in.
template <typename Dot>
float WeightedReluSum(int64_t n_heads, int64_t d, const float* weights, const Dot& dot) {
  const float dot_scale = 1.0f / std::sqrt(static_cast<float>(d));
  float sum = 0.0f;
  for (int64_t h = 0; h < n_heads; ++h) sum = std::fma(weights[h], std::max(dot(h) * dot_scale, 0.0f), sum);
  return sum;
}

// Scores every key count around the 64-slot blocks, for d_I 16 and 128 and 1-3 rows, together and
// each row alone, and holds every score bit for bit to the model, −∞ past the row's position.
//   score(dims, keys, num_keys, q, head_weights, rows, positions, out): lays keys [num_keys, d_I] out
//       in the storage under test (a cache of num_keys + 5 slots, whatever a read past the last key
//       would show in the unused ones) and scores them; q [rows, N_I, d_I] and head_weights
//       [rows, N_I] are its to modify.
//   expected(dims, q, head_weights, keys, j): the score of key j for the row whose query heads are
//       q [N_I, d_I] and head weights head_weights [N_I].
template <typename Score, typename Expected>
void CheckScoresBitForBit(const Score& score, const Expected& expected) {
  for (int64_t d : {16, 128}) {
    for (int64_t num_keys : {1, 63, 64, 65, 200, 300}) {
      IndexerDims dims;
      dims.n_heads = 8;
      dims.head_dim = d;
      const int64_t nh = dims.n_heads, rows = std::min<int64_t>(3, num_keys);
      const std::vector<float> keys = RandomFloats(num_keys * d, static_cast<uint32_t>(num_keys + d));
      const std::vector<float> q = RandomFloats(rows * nh * d, 7), head_weights = RandomFloats(rows * nh, 8);
      std::vector<int64_t> positions(rows);
      for (int64_t r = 0; r < rows; ++r) positions[r] = num_keys - rows + r;
      std::vector<float> q_all = q, w_all = head_weights, together(rows * num_keys);
      score(dims, keys, num_keys, q_all.data(), w_all.data(), rows, positions.data(), together.data());
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> q_one(q.begin() + r * nh * d, q.begin() + (r + 1) * nh * d);
        std::vector<float> w_one(head_weights.begin() + r * nh, head_weights.begin() + (r + 1) * nh);
        std::vector<float> alone(num_keys);
        score(dims, keys, num_keys, q_one.data(), w_one.data(), 1, &positions[r], alone.data());
        for (int64_t j = 0; j < num_keys; ++j) {
          const float want = j <= positions[r]
                                 ? expected(dims, q.data() + r * nh * d, head_weights.data() + r * nh, keys, j)
                                 : -std::numeric_limits<float>::infinity();
          ASSERT_EQ(std::bit_cast<uint32_t>(together[r * num_keys + j]), std::bit_cast<uint32_t>(want))
              << "d " << d << " keys " << num_keys << " row " << r << " key " << j;
          ASSERT_EQ(std::bit_cast<uint32_t>(alone[j]), std::bit_cast<uint32_t>(want))
              << "alone: d " << d << " keys " << num_keys << " row " << r << " key " << j;
        }
      }
    }
  }
}

}  // namespace mtpspec::testing_util
