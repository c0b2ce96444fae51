// The lightning indexer on the GPU against its CPU twin: key writes, scores (bf16 weights on both
// sides), the radix top-k against SelectTopK on identical scores (exact lists, ties included), and
// row-count invariance of the scores.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention/indexer.h"
#include "attention/indexer_cuda.h"
#include "attention/rope_cuda.h"
#include "gtest/gtest.h"
#include "tests/cuda/attention_cuda_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scores with many exact ties (a few levels, ±0 among them), −∞ past each row's causal end.
std::vector<float> TiedScores(int64_t rows, int64_t num_keys, int64_t first_position, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> level(-6, 9);
  std::vector<float> scores(rows * num_keys);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < num_keys; ++j) {
      const int l = level(rng);
      float v = l == 0 ? (j % 2 ? -0.0f : 0.0f) : 0.25f * static_cast<float>(l);
      if (j > first_position + r) v = kNegInf;
      scores[r * num_keys + j] = v;
    }
  }
  return scores;
}

void CheckTopK(int64_t rows, int64_t num_keys, int64_t k, int64_t first_position, bool ties, uint64_t seed) {
  auto ctx_or = Context::Create();
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();
  Context& ctx = **ctx_or;
  std::mt19937_64 rng(seed);
  std::vector<float> scores = TiedScores(rows, num_keys, first_position, rng);
  if (!ties) {
    std::normal_distribution<float> normal;
    for (float& s : scores) {
      if (s != kNegInf) s = normal(rng);
    }
  }
  std::vector<int64_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = first_position + r;
  const TopK expected = SelectTopK(scores.data(), rows, num_keys, k, positions.data());

  DeviceArray<float> d_scores = ToDevice(scores, ctx);
  auto workspace = DeviceArray<uint8_t>::Create(static_cast<int64_t>(SelectTopKWorkspaceBytes(rows, num_keys)), "ws");
  ASSERT_TRUE(workspace.ok());
  DeviceTopK topk;
  const absl::Status st =
      SelectTopKCuda(ctx, d_scores.data(), rows, num_keys, k, first_position, workspace->data(), &topk);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(topk.width, expected.width);
  ASSERT_EQ(topk.rows, rows);
  std::vector<int32_t> got(rows * topk.width);
  ASSERT_TRUE(topk.selected.CopyToHost(got.data(), rows * topk.width, ctx.stream()).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < topk.width; ++i) {
      ASSERT_EQ(got[r * topk.width + i], expected.row(r)[i]) << "row " << r << " entry " << i;
    }
  }
}

TEST(IndexerCuda, TopKEqualsCpuWithTies) {
  MTPSPEC_REQUIRE_GPU();
  // Rows 0 and 1 have ≤ width causal keys (the iota rule), the others select among ties.
  CheckTopK(/*rows=*/6, /*num_keys=*/3000, /*k=*/500, /*first_position=*/498, /*ties=*/true, 1);
  CheckTopK(4, 3000, 500, 2996, true, 2);  // last rows see every key
}

TEST(IndexerCuda, TopKEqualsCpuLongRows) {
  MTPSPEC_REQUIRE_GPU();
  CheckTopK(3, 70000, 2048, 69997, false, 3);
  CheckTopK(2, 70000, 2048, 40000, true, 4);
  CheckTopK(1, 100, 2048, 99, false, 5);  // width = T: every key
}

struct IndexerFixture {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<testing::RandomMla> mla;
  WeightArena arena;
  DeviceIndexerWeights weights;
  DeviceRope rope;
};

void MakeFixture(IndexerFixture& f, RopeStyle style) {
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  f.ctx = std::move(*ctx);
  testing::MlaShape shape;
  shape.index_style = style;
  f.mla = testing::MakeRandomMla(shape, /*full_layer=*/true, 11);
  auto w = UploadIndexerWeights(f.arena, *f.mla->weights.indexer, "indexer.");
  ASSERT_TRUE(w.ok()) << w.status();
  f.weights = *w;
  auto rope = DeviceRope::Create(f.mla->rope, 512);
  ASSERT_TRUE(rope.ok()) << rope.status();
  f.rope = std::move(*rope);
}

TEST(IndexerCuda, KeysAndScoresMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    IndexerFixture f;
    MakeFixture(f, style);
    const IndexerDims& dims = f.mla->dims.indexer;
    const int64_t hidden = f.mla->dims.hidden, r_q = f.mla->dims.q_lora, d = dims.head_dim;
    const int64_t rows = 7, first = 300, num_keys = first + rows, capacity = 512;
    std::mt19937_64 rng(21);
    const std::vector<float> x = testing::RandomValues(rows * hidden, 1.0f, rng);
    const std::vector<float> q_latent = testing::RandomValues(rows * r_q, 1.0f, rng);
    const std::vector<float> key_rows = testing::RandomValues(capacity * d, 1.0f, rng);  // [capacity, d_I]
    // The CPU cache holds the same keys in its transposed blocks (attention/indexer.h).
    std::vector<float> key_cache(IndexKeyBlocks(capacity) * d * kIndexKeyBlock);  // [blocks, d_I, 64]
    for (int64_t j = 0; j < capacity; ++j) {
      for (int64_t t = 0; t < d; ++t) key_cache[IndexKeyOffset(j, t, d)] = key_rows[j * d + t];
    }
    std::vector<int64_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = first + r;

    DeviceArray<float> d_x = ToDevice(x, *f.ctx), d_q = ToDevice(q_latent, *f.ctx);
    DeviceArray<float> d_keys = ToDevice(key_rows, *f.ctx);
    IndexerWriteKeys(*f.mla->weights.indexer, dims, f.mla->rope, x.data(), rows, positions.data(), key_cache.data());
    ASSERT_TRUE(IndexerWriteKeysCuda(*f.ctx, f.weights, dims, f.rope, d_x.data(), rows, first, d_keys.data(), capacity)
                    .ok());
    const std::vector<float> got_keys = ToHost(d_keys, *f.ctx);  // [capacity, d_I]
    std::vector<float> cpu_keys(capacity * d);                    // [capacity, d_I]
    for (int64_t j = 0; j < capacity; ++j) {
      for (int64_t t = 0; t < d; ++t) cpu_keys[j * d + t] = key_cache[IndexKeyOffset(j, t, d)];
    }
    EXPECT_LT(testing::RelativeMaxError(got_keys, cpu_keys), 1e-4);

    std::vector<float> expected(rows * num_keys);
    IndexerScores(*f.mla->weights.indexer, dims, f.mla->rope, x.data(), q_latent.data(), rows, positions.data(),
                  key_cache.data(), num_keys, expected.data());
    auto scratch = DeviceArray<float>::Create(IndexerScoresScratchFloats(rows, dims), "scratch");
    auto scores = DeviceArray<float>::Create(rows * num_keys, "scores");
    ASSERT_TRUE(scratch.ok() && scores.ok());
    ASSERT_TRUE(IndexerScoresCuda(*f.ctx, f.weights, dims, f.rope, d_x.data(), d_q.data(), rows, first, d_keys.data(),
                                  num_keys, scratch->data(), scores->data())
                    .ok());
    const std::vector<float> got = ToHost(*scores, *f.ctx);
    std::vector<float> got_finite, expected_finite;
    for (int64_t i = 0; i < rows * num_keys; ++i) {
      ASSERT_EQ(got[i] == kNegInf, expected[i] == kNegInf) << "mask differs at " << i;
      if (expected[i] != kNegInf) {
        got_finite.push_back(got[i]);
        expected_finite.push_back(expected[i]);
      }
    }
    EXPECT_LT(testing::RelativeMaxError(got_finite, expected_finite), 1e-4);
  }
}

TEST(IndexerCuda, ScoresDoNotDependOnRowCount) {
  MTPSPEC_REQUIRE_GPU();
  IndexerFixture f;
  MakeFixture(f, RopeStyle::kInterleaved);
  const int64_t nh = 32, d = 64, num_keys = 1000, first = 900;  // larger than the fixture: kernel only
  std::mt19937_64 rng(5);
  const std::vector<float> q = testing::RandomValues(16 * nh * d, 1.0f, rng);
  const std::vector<float> w = testing::RandomValues(16 * nh, 1.0f, rng);
  const std::vector<float> keys = testing::RandomValues(num_keys * d, 1.0f, rng);
  DeviceArray<float> d_q = ToDevice(q, *f.ctx), d_w = ToDevice(w, *f.ctx), d_keys = ToDevice(keys, *f.ctx);
  auto block = DeviceArray<float>::Create(16 * num_keys, "block");
  auto single = DeviceArray<float>::Create(num_keys, "single");
  ASSERT_TRUE(block.ok() && single.ok());
  for (int64_t rows : {16, 5}) {
    ASSERT_TRUE(IndexerScoreKeys(*f.ctx, d_q.data(), d_w.data(), rows, nh, d, first, d_keys.data(), num_keys,
                                 block->data())
                    .ok());
    const std::vector<float> all = ToHost(*block, *f.ctx);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(IndexerScoreKeys(*f.ctx, d_q.data() + r * nh * d, d_w.data() + r * nh, 1, nh, d, first + r,
                                   d_keys.data(), num_keys, single->data())
                      .ok());
      const std::vector<float> one = ToHost(*single, *f.ctx);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * num_keys, num_keys * sizeof(float))) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace mtpspec::cuda
