// Tree verify on the real model (random tiny checkpoint): every node's logits and hidden state equal
// those of the chain of its path, bit for bit, on the dense and the gather path; the paths agree
// with each other on a tree; keeping the accepted path leaves the cache a chain would have left;
// and bad trees are refused.
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/model_target.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

using testing_util::Range;
using testing_util::RelativeMaxDiff;
using testing_util::TestTokens;
using testing_util::TinyModelEnv;

using testing_util::Tiny;

// 12 rows: the root, three children, then uneven branches down to depth 4.
const std::vector<int32_t> kParents = {-1, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 8};

std::vector<int64_t> PathTo(const std::vector<int32_t>& parents, int64_t row) {
  std::vector<int64_t> path;
  for (int64_t r = row; r >= 0; r = parents[r]) path.insert(path.begin(), r);
  return path;
}

bool SameBits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

std::unique_ptr<ModelTarget> TargetWithPrefix(const std::vector<int32_t>& prefix, LatentStorage storage,
                                              AttentionOptions attention = {}) {
  auto target = ModelTarget::Create(Tiny(), 64, attention, storage);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!prefix.empty()) {
    auto ran = (*target)->Run(prefix, /*all_logits=*/false);
    EXPECT_TRUE(ran.ok()) << ran.status();
  }
  return std::move(*target);
}

// Prefixes from 2 to 40 tokens with K = 8: the dense path (T ≤ K), the gather path with rows that
// see fewer than K keys (re-masked), and rows that see more than K (a real top-K over the visible keys).
TEST(TreeVerifyTest, EveryNodeEqualsTheChainOfItsPathBitForBit) {
  const int64_t vocab = Tiny().config().vocab_size, H = Tiny().config().hidden_size;
  const auto tokens = TestTokens(64, vocab, 21);
  for (LatentStorage storage : {LatentStorage::kF32, LatentStorage::kInt8, LatentStorage::kFp8}) {
    for (int64_t prefix_length : {2, 5, 9, 20, 40}) {
      const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + prefix_length);
      const std::vector<int32_t> tree_tokens(tokens.begin() + prefix_length,
                                             tokens.begin() + prefix_length + static_cast<int64_t>(kParents.size()));
      auto tree_target = TargetWithPrefix(prefix, storage);
      auto tree = tree_target->RunTree(tree_tokens, kParents);
      ASSERT_TRUE(tree.ok()) << tree.status();
      ASSERT_EQ(tree->logits.dim(0), static_cast<int64_t>(kParents.size()));
      for (int64_t row = 0; row < static_cast<int64_t>(kParents.size()); ++row) {
        std::vector<int32_t> chain_tokens;
        for (int64_t r : PathTo(kParents, row)) chain_tokens.push_back(tree_tokens[r]);
        auto chain_target = TargetWithPrefix(prefix, storage);
        auto chain = chain_target->Run(chain_tokens, /*all_logits=*/true);
        ASSERT_TRUE(chain.ok()) << chain.status();
        const int64_t last = static_cast<int64_t>(chain_tokens.size()) - 1;
        EXPECT_TRUE(SameBits(tree->logits.data<float>() + row * vocab, chain->logits.data<float>() + last * vocab,
                             vocab))
            << "prefix " << prefix_length << " row " << row << " storage " << LatentStorageName(storage);
        EXPECT_TRUE(SameBits(tree->hidden_prenorm.data<float>() + row * H,
                             chain->hidden_prenorm.data<float>() + last * H, H))
            << "prefix " << prefix_length << " row " << row;
      }
    }
  }
}

// On a tree, the gather path (top-K over each row's visible keys) agrees with the mask path (all T
// keys scored, −∞ outside top-K and the row's path) in both attention forms, and with the dense
// path while T ≤ K.
TEST(TreeVerifyTest, TheAttentionPathsAgreeOnATree) {
  const int64_t k = Tiny().config().index_topk;
  const auto tokens = TestTokens(64, Tiny().config().vocab_size, 23);
  const int64_t rows = static_cast<int64_t>(kParents.size());
  for (int64_t prefix_length : {1, 4, 9, 15, 30}) {
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + prefix_length);
    const std::vector<int32_t> tree_tokens(tokens.begin() + prefix_length, tokens.begin() + prefix_length + rows);
    std::vector<std::pair<AttentionPath, AttentionForm>> variants = {{AttentionPath::kGather, AttentionForm::kAbsorbed},
                                                                     {AttentionPath::kMask, AttentionForm::kNaive},
                                                                     {AttentionPath::kMask, AttentionForm::kAbsorbed}};
    if (prefix_length + rows <= k) {
      variants.push_back({AttentionPath::kDense, AttentionForm::kNaive});
      variants.push_back({AttentionPath::kDense, AttentionForm::kAbsorbed});
    }
    std::vector<TargetStep> outs;
    for (auto [path, form] : variants) {
      AttentionOptions attention;
      attention.path = path;
      attention.form = form;
      auto forced_target = TargetWithPrefix(prefix, LatentStorage::kF32, attention);
      auto tree = forced_target->RunTree(tree_tokens, kParents);
      ASSERT_TRUE(tree.ok()) << tree.status();
      outs.push_back(std::move(*tree));
    }
    // The absorbed form scores the same products in the same order on every path (1e-6); the naive
    // form expands k_nope and v first, a different rounding of the same sums (the chain tests allow
    // it 1e-5).
    for (size_t v = 1; v < outs.size(); ++v) {
      const double limit = variants[v].second == AttentionForm::kAbsorbed ? 1e-6 : 5e-6;
      EXPECT_LT(RelativeMaxDiff(outs[v].logits, outs[0].logits), limit) << "prefix " << prefix_length << " variant " << v;
    }
  }
}

// Keeping a path moves its rows to consecutive positions: the next forward then gives exactly what
// it gives after the chain of that path.
TEST(TreeVerifyTest, KeepingAPathLeavesTheCacheOfItsChain) {
  const int64_t vocab = Tiny().config().vocab_size;
  const auto tokens = TestTokens(64, vocab, 25);
  const int64_t rows = static_cast<int64_t>(kParents.size());
  for (LatentStorage storage : {LatentStorage::kF32, LatentStorage::kInt8, LatentStorage::kFp8}) {
    for (int64_t prefix_length : {3, 20}) {
      const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + prefix_length);
      const std::vector<int32_t> tree_tokens(tokens.begin() + prefix_length, tokens.begin() + prefix_length + rows);
      for (int64_t leaf : {0, 3, 10, 11}) {
        const std::vector<int64_t> path = PathTo(kParents, leaf);
        auto tree_target = TargetWithPrefix(prefix, storage);
        ASSERT_TRUE(tree_target->RunTree(tree_tokens, kParents).ok());
        ASSERT_TRUE(tree_target->KeepTreePath(path).ok());
        EXPECT_EQ(tree_target->length(), prefix_length + static_cast<int64_t>(path.size()));

        std::vector<int32_t> chain_tokens;
        for (int64_t r : path) chain_tokens.push_back(tree_tokens[r]);
        auto chain_target = TargetWithPrefix(prefix, storage);
        ASSERT_TRUE(chain_target->Run(chain_tokens, false).ok());

        const std::vector<int32_t> next = {tokens[60], tokens[61], tokens[62]};
        auto after_tree = tree_target->Run(next, true);
        auto after_chain = chain_target->Run(next, true);
        ASSERT_TRUE(after_tree.ok() && after_chain.ok());
        EXPECT_TRUE(SameBits(after_tree->logits.data<float>(), after_chain->logits.data<float>(), 3 * vocab))
            << "prefix " << prefix_length << " leaf " << leaf << " storage " << LatentStorageName(storage);
      }
    }
  }
}

TEST(TreeVerifyTest, BadTreesAreRefusedAndLoseNothing) {
  const auto tokens = TestTokens(20, Tiny().config().vocab_size, 27);
  const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + 5);
  const std::vector<int32_t> three = {tokens[5], tokens[6], tokens[7]};
  auto target = TargetWithPrefix(prefix, LatentStorage::kF32);
  auto error_of = [&](std::vector<int32_t> parents) {
    auto run = target->RunTree(three, parents);
    EXPECT_FALSE(run.ok());
    return std::string(run.status().message());
  };
  EXPECT_THAT(error_of({0, 0, 1}), testing::HasSubstr("parents[0] must be -1"));
  EXPECT_THAT(error_of({-1, 0, 2}), testing::HasSubstr("parents[2] = 2 must name an earlier row"));
  EXPECT_THAT(error_of({-1, 0, -1}), testing::HasSubstr("parents[2] = -1"));
  EXPECT_THAT(error_of({-1, 0}), testing::HasSubstr("3 tokens but 2 parents"));
  EXPECT_EQ(target->length(), 5);  // nothing was written

  EXPECT_THAT(std::string(target->KeepTreePath(std::vector<int64_t>{0}).message()),
              testing::HasSubstr("no RunTree"));
  ASSERT_TRUE(target->RunTree(three, std::vector<int32_t>{-1, 0, 0}).ok());
  EXPECT_THAT(std::string(target->KeepTreePath(std::vector<int64_t>{0, 1, 2}).message()),
              testing::HasSubstr("path[2] = 2 is not a child of the row before"));
  EXPECT_THAT(std::string(target->KeepTreePath(std::vector<int64_t>{1}).message()),
              testing::HasSubstr("path[0] = 1 is not the root 0"));
  ASSERT_TRUE(target->KeepTreePath(std::vector<int64_t>{0, 2}).ok());
  EXPECT_EQ(target->length(), 7);

  // A tree that does not fit in the cache says so and leaves the cache as it was.
  auto small = ModelTarget::Create(Tiny(), 8);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE((*small)->Run(prefix, false).ok());
  auto too_big = (*small)->RunTree(std::vector<int32_t>(4, tokens[9]), std::vector<int32_t>{-1, 0, 0, 0});
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(std::string(too_big.status().message()), testing::HasSubstr("beyond the cache capacity 8"));
  EXPECT_EQ((*small)->length(), 5);

  // The model's own checks: a node placed after its slot, and a tree of the wrong size.
  auto cache = *Tiny().NewCache(32);
  TreeMask mask = *TreeMaskFromParents(0, std::vector<int32_t>{-1, 0});
  ForwardOptions options;
  options.attention.tree = &mask;
  auto late = Tiny().Forward(*cache, three, std::vector<int64_t>{0, 1, 2}, options);
  EXPECT_THAT(std::string(late.status().message()), testing::HasSubstr("3 tokens but a tree of 2 rows"));
  auto placed = Tiny().Forward(*cache, std::vector<int32_t>{three[0], three[1]}, std::vector<int64_t>{0, 2}, options);
  EXPECT_THAT(std::string(placed.status().message()), testing::HasSubstr("tree row 1 at position 2 outside [0, its slot 1]"));
}

}  // namespace
}  // namespace mtpspec
