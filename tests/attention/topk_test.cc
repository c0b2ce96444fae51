// SelectTopK (attention/indexer.h) against a reference: a stable descending sort of the causal
// scores (larger first, equal scores by lower index), its first K listed by index.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "attention/indexer.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

std::vector<int32_t> ReferenceTopK(const float* row, int64_t causal, int64_t k) {
  std::vector<int32_t> order(causal);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [row](int32_t a, int32_t b) { return row[a] > row[b]; });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST(SelectTopKTest, MatchesAStableSortIncludingTiesAndSignedZeros) {
  std::mt19937 rng(3);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t num_keys : {9, 64, 300, 5000}) {
    for (int64_t k : {1, 8, 64, 512}) {
      for (int kind = 0; kind < 4; ++kind) {
        const int64_t rows = 3;
        std::vector<int64_t> positions(rows);
        for (int64_t r = 0; r < rows; ++r) positions[r] = num_keys - rows + r;
        std::vector<float> scores(rows * num_keys);  // [rows, T]
        std::uniform_real_distribution<float> value(-2.0f, 2.0f);
        std::uniform_int_distribution<int> small(-3, 3);
        for (int64_t i = 0; i < rows * num_keys; ++i) {
          switch (kind) {
            case 0: scores[i] = value(rng); break;                             // distinct
            case 1: scores[i] = static_cast<float>(small(rng)); break;         // many ties
            case 2: scores[i] = small(rng) == 0 ? -0.0f : 0.0f; break;         // ±0 only
            default: scores[i] = small(rng) < 0 ? neg_inf : value(rng); break;  // −∞ mixed in
          }
        }
        const TopK top = SelectTopK(scores.data(), rows, num_keys, k, positions.data());
        ASSERT_EQ(top.width, std::min(k, num_keys));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t causal = positions[r] + 1;
          if (causal <= top.width) continue;  // every causal key (covered by the model tests)
          const std::vector<int32_t> expected = ReferenceTopK(scores.data() + r * num_keys, causal, top.width);
          const std::vector<int32_t> got(top.row(r), top.row(r) + top.width);
          ASSERT_EQ(got, expected) << "T " << num_keys << " k " << k << " kind " << kind << " row " << r;
        }
      }
    }
  }
}

// A prefill chunk's shape: enough rows and keys that the rows split across the pool, each row with
// its own causal bound (rows before K keys take every causal key, then the earliest future ones).
TEST(SelectTopKTest, PrefillRowsSplitAcrossThePoolMatchTheReference) {
  std::mt19937 rng(5);
  constexpr int64_t kRows = 96, kKeys = 4096, kTop = 2048;
  std::vector<int64_t> positions(kRows);
  for (int64_t r = 0; r < kRows; ++r) positions[r] = 1990 + 41 * r;  // 1990 .. 5885: some T ≤ K
  std::vector<float> scores(kRows * kKeys);  // [rows, T]
  std::uniform_int_distribution<int> value(-50, 50);  // ties across the split too
  for (float& s : scores) s = static_cast<float>(value(rng)) * 0.125f;
  const TopK top = SelectTopK(scores.data(), kRows, kKeys, kTop, positions.data());
  ASSERT_EQ(top.width, kTop);
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t causal = std::min(positions[r] + 1, kKeys);
    std::vector<int32_t> expected(kTop);
    if (causal <= kTop) {
      std::iota(expected.begin(), expected.end(), 0);
    } else {
      expected = ReferenceTopK(scores.data() + r * kKeys, causal, kTop);
    }
    const std::vector<int32_t> got(top.row(r), top.row(r) + kTop);
    ASSERT_EQ(got, expected) << "row " << r;
  }
}

}  // namespace
}  // namespace mtpspec
