// Model::ForwardBatch: every sequence of a batched forward equals its own Forward bit for bit
// (logits, hidden states, attention paths and the cache it leaves), for batches of 1 to 8 sequences
// of 1 to 16 rows on the dense and gather regimes, token trees among chains too; the expert union obeys its bounds; bad batches
// are refused and leave every cache as it was.
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "attention/tree_mask.h"
#include "model/model.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

using testing_util::Range;
using testing_util::TestTokens;

const Model& Load(const std::string& name) {
  static auto* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (!slot) {
    auto m = Model::Load(absl::StrCat(MTPSPEC_GOLDEN_DIR, "/", name));
    EXPECT_TRUE(m.ok()) << m.status();
    slot = std::move(*m);
  }
  return *slot;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)) == 0;
}

// One sequence: its prompt (prefilled alone) and the block the batch then runs.
struct Sequence {
  std::vector<int32_t> prompt, block;
  std::unique_ptr<KvCache> alone, batched;  // twin caches
};

class BatchForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchForwardTest, EverySequenceEqualsItsOwnForward) {
  const Model& model = Load(GetParam());
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size;
  for (int64_t batch = 1; batch <= 8; ++batch) {
    std::vector<Sequence> sequences(batch);
    for (int64_t s = 0; s < batch; ++s) {
      Sequence& q = sequences[s];
      // Prompts on both sides of index_topk; blocks of 1 to 16 rows (a plain step to k = 15).
      const int64_t length = (s % 2 == 0) ? 2 + s : K + 3 + 5 * s;
      const int64_t rows = 1 + (s * 5 + batch) % 16;
      q.prompt = TestTokens(length, V, 100 + s);
      q.block = TestTokens(rows, V, 900 + s * 7 + batch);
      q.alone = *model.NewCache(128);
      q.batched = *model.NewCache(128);
      for (KvCache* cache : {q.alone.get(), q.batched.get()}) {
        ASSERT_TRUE(model.Forward(*cache, q.prompt, Range(0, length)).ok());
      }
    }
    for (int round = 0; round < 2; ++round) {  // the second starts one row back: a rollback
      std::vector<std::vector<int64_t>> positions(batch);
      std::vector<BatchSequence> request(batch);
      for (int64_t s = 0; s < batch; ++s) {
        Sequence& q = sequences[s];
        const int64_t first = q.batched->length() - round;
        positions[s] = Range(first, first + static_cast<int64_t>(q.block.size()));
        request[s] = {q.batched.get(), q.block, positions[s]};
      }
      auto together = model.ForwardBatch(request);
      ASSERT_TRUE(together.ok()) << together.status();
      ASSERT_EQ(together->sequences.size(), static_cast<size_t>(batch));
      int64_t rows = 0;
      for (int64_t s = 0; s < batch; ++s) {
        Sequence& q = sequences[s];
        rows += static_cast<int64_t>(q.block.size());
        auto alone = model.Forward(*q.alone, q.block, positions[s]);
        ASSERT_TRUE(alone.ok()) << alone.status();
        const ForwardOutput& mine = together->sequences[s];
        EXPECT_TRUE(SameBits(mine.logits, alone->logits)) << "B " << batch << " sequence " << s << " round " << round;
        EXPECT_TRUE(SameBits(mine.hidden_prenorm, alone->hidden_prenorm)) << "B " << batch << " sequence " << s;
        EXPECT_TRUE(SameBits(mine.hidden_postnorm, alone->hidden_postnorm)) << "B " << batch << " sequence " << s;
        EXPECT_EQ(mine.paths, alone->paths) << "B " << batch << " sequence " << s;
        EXPECT_EQ(q.batched->length(), q.alone->length());
      }
      EXPECT_EQ(together->rows, rows);
      // The expert union of each MoE layer: at least one row's top-k, at most every expert or every choice.
      const int64_t E = model.config().n_routed_experts, k = model.config().num_experts_per_tok;
      for (int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
        if (l < model.config().first_k_dense_replace) {
          EXPECT_EQ(together->experts_used[l], 0);
        } else {
          EXPECT_GE(together->experts_used[l], k);
          EXPECT_LE(together->experts_used[l], std::min(E, rows * k));
        }
      }
    }
    // The caches the batch left decode the next token as the ones run alone do.
    for (int64_t s = 0; s < batch; ++s) {
      Sequence& q = sequences[s];
      const std::vector<int32_t> next = {static_cast<int32_t>(s % V)};
      const std::vector<int64_t> at = {q.alone->length()};
      auto a = model.Forward(*q.alone, next, at);
      auto b = model.Forward(*q.batched, next, at);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_TRUE(SameBits(a->logits, b->logits)) << "B " << batch << " sequence " << s << " after the batch";
    }
  }
}

// Token trees in a batch: sequences that verify a tree (their own mask, positions first slot +
// depth) beside chains give each exactly its own tree Forward, and the tree's kept path then
// decodes as the one run alone.
TEST_P(BatchForwardTest, TreeSequencesEqualTheirOwnTreeForward) {
  const Model& model = Load(GetParam());
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size;
  const std::vector<std::vector<int32_t>> shapes = {{}, {-1, 0, 0, 1, 1, 2}, {}, {-1, 0, 1, 1, 0, 4, 2, 0}};
  const int64_t batch = static_cast<int64_t>(shapes.size());
  std::vector<Sequence> sequences(batch);
  std::vector<TreeMask> masks(batch);
  std::vector<std::vector<int64_t>> positions(batch);
  std::vector<BatchSequence> request(batch);
  for (int64_t s = 0; s < batch; ++s) {
    Sequence& q = sequences[s];
    const int64_t length = s < 2 ? 3 + s : K + 4 + 3 * s;  // dense and gather regimes
    q.prompt = TestTokens(length, V, 300 + s);
    const int64_t rows = shapes[s].empty() ? 3 + s : static_cast<int64_t>(shapes[s].size());
    q.block = TestTokens(rows, V, 700 + s);
    q.alone = *model.NewCache(128);
    q.batched = *model.NewCache(128);
    for (KvCache* cache : {q.alone.get(), q.batched.get()}) {
      ASSERT_TRUE(model.Forward(*cache, q.prompt, Range(0, length)).ok());
    }
    if (shapes[s].empty()) {
      positions[s] = Range(length, length + rows);
    } else {
      masks[s] = *TreeMaskFromParents(length, shapes[s]);
      for (int64_t depth : TreeDepths(shapes[s])) positions[s].push_back(length + depth);
    }
    request[s] = {q.batched.get(), q.block, positions[s], shapes[s].empty() ? nullptr : &masks[s]};
  }
  auto together = model.ForwardBatch(request);
  ASSERT_TRUE(together.ok()) << together.status();
  for (int64_t s = 0; s < batch; ++s) {
    Sequence& q = sequences[s];
    ForwardOptions own;
    own.attention.tree = shapes[s].empty() ? nullptr : &masks[s];
    auto alone = model.Forward(*q.alone, q.block, positions[s], own);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const ForwardOutput& mine = together->sequences[s];
    EXPECT_TRUE(SameBits(mine.logits, alone->logits)) << "sequence " << s;
    EXPECT_TRUE(SameBits(mine.hidden_prenorm, alone->hidden_prenorm)) << "sequence " << s;
    EXPECT_TRUE(SameBits(mine.hidden_postnorm, alone->hidden_postnorm)) << "sequence " << s;
    EXPECT_EQ(mine.paths, alone->paths) << "sequence " << s;
    ASSERT_EQ(q.batched->length(), q.alone->length()) << "sequence " << s;
    if (!shapes[s].empty()) {  // keep the path root → row 1 → its first child, on both caches
      const int64_t n = static_cast<int64_t>(q.prompt.size());
      const std::vector<int64_t> slots = {n, n + 1, n + 3};
      ASSERT_TRUE(q.alone->KeepSlots(n, slots).ok());
      ASSERT_TRUE(q.batched->KeepSlots(n, slots).ok());
    }
    const std::vector<int32_t> next = {static_cast<int32_t>((s + 5) % V)};
    const std::vector<int64_t> at = {q.alone->length()};
    auto a = model.Forward(*q.alone, next, at);
    auto b = model.Forward(*q.batched, next, at);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(SameBits(a->logits, b->logits)) << "sequence " << s << " after the batch";
  }
}

TEST_P(BatchForwardTest, OneRowChoosesExactlyTopKExpertsAndCopiesAddNone) {
  const Model& model = Load(GetParam());
  const int64_t V = model.config().vocab_size, k = model.config().num_experts_per_tok;
  std::vector<std::unique_ptr<KvCache>> caches;
  const std::vector<int32_t> prompt = TestTokens(12, V, 5), block = TestTokens(3, V, 6);
  const std::vector<int32_t> one = {block[0]};
  const std::vector<int64_t> positions = Range(12, 15), first = {12};
  std::vector<BatchSequence> single, copies;
  for (int i = 0; i < 4; ++i) {
    caches.push_back(*model.NewCache(64));
    ASSERT_TRUE(model.Forward(*caches.back(), prompt, Range(0, 12)).ok());
  }
  single.push_back({caches[0].get(), one, first});
  auto a = model.ForwardBatch(single);
  ASSERT_TRUE(a.ok());
  for (int64_t l = model.config().first_k_dense_replace; l < model.config().num_hidden_layers; ++l) {
    EXPECT_EQ(a->experts_used[l], k) << "layer " << l;
  }
  auto lone = model.ForwardBatch(std::vector<BatchSequence>{{caches[1].get(), block, positions}});
  for (int i = 2; i < 4; ++i) copies.push_back({caches[i].get(), block, positions});
  copies.insert(copies.begin(), {caches[0].get(), block, positions});
  ASSERT_TRUE(caches[0]->Truncate(12).ok());
  auto together = model.ForwardBatch(copies);
  ASSERT_TRUE(lone.ok() && together.ok());
  EXPECT_EQ(together->experts_used, lone->experts_used);  // identical rows route identically
}

TEST(BatchForwardErrorsTest, BadBatchesAreRefusedAndLeaveTheCaches) {
  const Model& model = Load("glm_a");
  const int64_t V = model.config().vocab_size;
  auto a = *model.NewCache(32), b = *model.NewCache(32);
  const std::vector<int32_t> prompt = TestTokens(5, V);
  ASSERT_TRUE(model.Forward(*a, prompt, Range(0, 5)).ok());
  ASSERT_TRUE(model.Forward(*b, prompt, Range(0, 5)).ok());
  const std::vector<int32_t> good = {1, 2}, bad = {1, static_cast<int32_t>(V)};
  const std::vector<int64_t> at = Range(5, 7), gap = Range(7, 9);
  auto expect_error = [&](std::vector<BatchSequence> batch, const std::string& message, ForwardOptions options = {}) {
    auto out = model.ForwardBatch(batch, options);
    ASSERT_FALSE(out.ok()) << message;
    EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr(message));
    EXPECT_EQ(a->length(), 5);
    EXPECT_EQ(b->length(), 5);
  };
  expect_error({}, "no sequences");
  expect_error({{a.get(), good, at}, {a.get(), good, at}}, "sequence 1 shares its cache");
  expect_error({{a.get(), good, at}, {b.get(), bad, at}}, "sequence 1: token id[1]");
  expect_error({{a.get(), good, at}, {b.get(), good, gap}}, "sequence 1: Forward: first position 7 leaves a gap");
  expect_error({{a.get(), good, at}, {nullptr, good, at}}, "sequence 1 has no cache");
  ForwardOptions rows;
  rows.logit_rows = {0};
  expect_error({{a.get(), good, at}}, "logit_rows must be empty", rows);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchForwardTest,
                         ::testing::Values("glm_a", "dsv32_b", "glm_a_bf16", "glm47_c", "dsv3_d"));

}  // namespace
}  // namespace mtpspec
