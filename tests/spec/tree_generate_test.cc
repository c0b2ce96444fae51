// Tree drafting end to end on real models (the golden random-weight ones and the trained tiny
// model): tree output is bit-identical to plain decoding at any temperature; the chain tree
// 1,1,…,1 gives exactly the chain's tokens and statistics; a tree node's children are what the
// chain of its path drafts; scripted trees that hide the right token at any sibling rank commit the
// right path; and the combinations that cannot branch are refused with a clear error.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mtp/mtp_chain_cpu.h"
#include "spec/generator.h"
#include "spec/lookup_drafter.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using testing_util::TestTokens;

const Model& Load(const std::string& name) { return testing_util::LoadMtpTestModel(name); }

absl::StatusOr<GenerateResult> GenerateWith(const Model& model, Drafter* drafter, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, int64_t capacity = 128) {
  auto target = ModelTarget::Create(model, capacity);
  if (!target.ok()) return target.status();
  return Generate(**target, drafter, prompt, options);
}

GenerateOptions Options(double temperature, uint64_t seed, TreeShape tree = {}, int64_t k = 0) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.k = k;
  o.tree = std::move(tree);
  o.accept.sampling.temperature = temperature;
  o.accept.sampling.seed = seed;
  o.stop_at_eos = false;
  return o;
}

TreeShape Static(std::vector<int64_t> branching) { return TreeShape{std::move(branching)}; }
TreeShape Dynamic(int64_t nodes, int64_t width = 4) { return TreeShape{{}, nodes, width}; }

class TreeGenerateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TreeGenerateTest, TreeOutputEqualsPlainOutput) {
  const Model& model = Load(GetParam());
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size;
  auto drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  int64_t accepted = 0, accepted_off_top = 0;
  for (double temperature : {0.0, 0.7, 1.0}) {
    for (int64_t length : {K - 3, K + 5}) {
      const auto prompt = TestTokens(std::max<int64_t>(length, 2), V, 200 + length);
      auto plain = GenerateWith(model, nullptr, prompt, Options(temperature, 9));
      ASSERT_TRUE(plain.ok()) << plain.status();
      for (const TreeShape& shape : {Static({3, 2, 1}), Static({2, 2, 1, 1}), Static({4}), Static({1, 3, 1}),
                                     Dynamic(6), Dynamic(15, 3)}) {
        auto tree = GenerateWith(model, drafter.get(), prompt, Options(temperature, 9, shape));
        ASSERT_TRUE(tree.ok()) << tree.status();
        EXPECT_EQ(tree->tokens, plain->tokens) << "T " << temperature << " prompt " << length << " tree " << shape.Name();
        EXPECT_EQ(tree->stats.tree, shape.Name());
        EXPECT_LE(tree->stats.num_accepted_tokens, tree->stats.num_draft_tokens);
        accepted += tree->stats.num_accepted_tokens;
        for (size_t rank = 1; rank < tree->stats.accepted_per_rank.size(); ++rank) {
          accepted_off_top += tree->stats.accepted_per_rank[rank];
        }
      }
    }
  }
  RecordProperty("accepted", static_cast<int>(accepted));
  if (GetParam() == "trained") {  // real acceptance, on the head's top token and below it
    EXPECT_GT(accepted, 100);
    EXPECT_GT(accepted_off_top, 0);
  }
}

TEST_P(TreeGenerateTest, TheChainTreeIsTheChain) {
  const Model& model = Load(GetParam());
  const int64_t V = model.config().vocab_size;
  auto chain_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto tree_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  const auto prompt = TestTokens(testing_util::SparseThreshold(model.config()) + 4, V, 31);
  for (double temperature : {0.0, 0.8}) {
    for (int64_t k = 1; k <= 4; ++k) {
      auto chain = GenerateWith(model, chain_drafter.get(), prompt, Options(temperature, 3, {}, k));
      auto tree = GenerateWith(model, tree_drafter.get(), prompt, Options(temperature, 3, Static(std::vector<int64_t>(k, 1))));
      ASSERT_TRUE(chain.ok() && tree.ok());
      EXPECT_EQ(tree->tokens, chain->tokens) << "k " << k;
      EXPECT_EQ(tree->stats.num_drafts, chain->stats.num_drafts) << "k " << k;
      EXPECT_EQ(tree->stats.num_draft_tokens, chain->stats.num_draft_tokens) << "k " << k;
      EXPECT_EQ(tree->stats.num_accepted_tokens, chain->stats.num_accepted_tokens) << "k " << k;
      EXPECT_EQ(tree->stats.accepted_per_pos, chain->stats.accepted_per_pos) << "k " << k;
      EXPECT_EQ(tree->stats.accepted_histogram, chain->stats.accepted_histogram) << "k " << k;
    }
  }
}

// Sampled drafts: the chain tree 1,…,1 with q-sampled children and rejection gives exactly the
// chain's sampled drafts under rejection (the same draws, tests and residuals).
TEST_P(TreeGenerateTest, TheSampledChainTreeIsTheSampledChain) {
  const Model& model = Load(GetParam());
  const int64_t V = model.config().vocab_size;
  auto chain_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto tree_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  const auto prompt = TestTokens(testing_util::SparseThreshold(model.config()) + 4, V, 37);
  int64_t accepted = 0;
  for (double temperature : {0.7, 1.0}) {
    for (int64_t k = 1; k <= 4; ++k) {
      GenerateOptions chain_options = Options(temperature, 5, {}, k);
      GenerateOptions tree_options = Options(temperature, 5, Static(std::vector<int64_t>(k, 1)));
      for (GenerateOptions* o : {&chain_options, &tree_options}) {
        o->sample_drafts = true;
        o->accept.rule = AcceptRule::kRejection;
      }
      auto chain = GenerateWith(model, chain_drafter.get(), prompt, chain_options);
      auto tree = GenerateWith(model, tree_drafter.get(), prompt, tree_options);
      ASSERT_TRUE(chain.ok()) << chain.status();
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->tokens, chain->tokens) << "T " << temperature << " k " << k;
      EXPECT_EQ(tree->stats.num_draft_tokens, chain->stats.num_draft_tokens) << "T " << temperature << " k " << k;
      EXPECT_EQ(tree->stats.accepted_per_pos, chain->stats.accepted_per_pos) << "T " << temperature << " k " << k;
      accepted += tree->stats.num_accepted_tokens;
    }
  }
  if (GetParam() == "trained") {
    EXPECT_GT(accepted, 20);
  }
}

// Sampled children are distinct draws from the head's q: a node's children never repeat a token,
// each has mass under the distribution the tree returns for its parent, and the first child of the
// root is the chain's sampled draft at that position.
TEST(MtpTreeDraftTest, SampledChildrenAreDistinctDrawsFromTheHead) {
  const Model& model = Load("trained");
  const int64_t V = model.config().vocab_size;
  const auto prompt = TestTokens(24, V, 41);
  auto target = *ModelTarget::Create(model, 128);
  auto tree_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto chain_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto prefill = target->Run(prompt, /*all_logits=*/true);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  std::vector<int32_t> sequence = prompt;
  sequence.push_back(Argmax(prefill->logits.data<float>() + (prompt.size() - 1) * V, V));
  for (Drafter* d : {static_cast<Drafter*>(tree_drafter.get()), static_cast<Drafter*>(chain_drafter.get())}) {
    ASSERT_TRUE(d->Observe(sequence, 0, static_cast<int64_t>(prompt.size()), *prefill).ok());
  }
  DraftSampling sampling;
  sampling.sample = true;
  sampling.sampling.temperature = 1.0;
  int64_t children_seen = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    sampling.sampling.seed = seed;
    auto tree = tree_drafter->ProposeTree(sequence, Static({4, 2}), sampling);
    ASSERT_TRUE(tree.ok()) << tree.status();
    ASSERT_EQ(tree->probs.size(), tree->tokens.size() + 1);
    std::map<int32_t, std::vector<int32_t>> children;  // verify row → its children's tokens
    for (size_t i = 0; i < tree->tokens.size(); ++i) {
      const int32_t parent = tree->parents[i];
      ASSERT_EQ(static_cast<int64_t>(tree->probs[parent].size()), V);
      EXPECT_GT(tree->probs[parent][tree->tokens[i]], 0.0);
      children[parent].push_back(tree->tokens[i]);
    }
    for (auto& [row, tokens] : children) {
      std::sort(tokens.begin(), tokens.end());
      EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end()) << "row " << row << " seed " << seed;
      children_seen += static_cast<int64_t>(tokens.size());
    }
    auto chain = chain_drafter->Propose(sequence, 1, sampling);
    ASSERT_TRUE(chain.ok()) << chain.status();
    ASSERT_EQ(chain->tokens.size(), 1u);
    EXPECT_EQ(tree->tokens[0], chain->tokens[0]) << "seed " << seed;
  }
  EXPECT_GT(children_seen, 20 * 4);  // the second depth was drawn too
}

INSTANTIATE_TEST_SUITE_P(Models, TreeGenerateTest,
                         ::testing::Values("glm_a", "dsv32_b", "glm47_c", "dsv3_d", "trained", "trained+bf16-keys",
                                           "trained+fp8-keys"));

// The head's `count` best tokens (ties by lower id) and their softmax probabilities, as ProposeTree
// ranks a node's children.
void Best(std::span<const float> logits, int64_t count, std::vector<int32_t>* ids, std::vector<double>* probs) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double top = logits[order[0]];
  double total = 0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - top);
  ids->assign(order.begin(), order.begin() + count);
  probs->clear();
  for (int32_t id : *ids) probs->push_back(std::exp(static_cast<double>(logits[id]) - top) / total);
}

// Each depth of a tree is one module forward over all its nodes; a node's children must still be
// exactly what the chain of its path drafts on its own (the per-row kernels and the tree mask).
TEST(MtpTreeDraftTest, ANodesChildrenAreWhatTheChainOfItsPathDrafts) {
  for (const std::string& name : {std::string("glm_a"), std::string("trained")}) {
    const Model& model = Load(name);
    for (int64_t length : {testing_util::SparseThreshold(model.config()) - 2, testing_util::SparseThreshold(model.config()) + 9}) {
      const auto prompt = TestTokens(length, model.config().vocab_size, 41);
      auto target = *ModelTarget::Create(model, 96);
      auto step = target->Run(prompt, /*all_logits=*/false);
      ASSERT_TRUE(step.ok());
      std::vector<int32_t> sequence = prompt;
      sequence.push_back(5);  // the pending token
      auto backend = CpuMtpBackend::Create(model, 96);
      ASSERT_TRUE(backend.ok()) << backend.status();
      auto chain = *MtpDraftChain::Create(std::move(*backend), MtpOptions{});
      ASSERT_TRUE(chain->Commit(sequence, 0, length, step->hidden_postnorm.data<float>()).ok());
      auto tree = chain->ProposeTree(sequence, Static({3, 2, 1}));
      ASSERT_TRUE(tree.ok()) << tree.status();
      ASSERT_EQ(tree->tokens.size(), 15u);
      // Every node with children: its path, then the chain that forces that path and reads the head.
      for (size_t node = 0; node < tree->tokens.size(); ++node) {
        std::vector<size_t> children;
        for (size_t c = 0; c < tree->tokens.size(); ++c) {
          if (tree->parents[c] == static_cast<int32_t>(node + 1)) children.push_back(c);
        }
        if (children.empty()) continue;
        std::vector<int32_t> path;
        for (int32_t row = static_cast<int32_t>(node + 1); row > 0; row = tree->parents[row - 1]) {
          path.insert(path.begin(), tree->tokens[row - 1]);
        }
        std::vector<float> head;  // [V] the head over the node's state
        size_t picked = 0;
        const MtpDraftPicker along = [&](MtpHeadRow& row, int64_t) -> absl::StatusOr<int32_t> {
          ASSIGN_OR_RETURN(std::span<const float> logits, row.HostLogits());
          head.assign(logits.begin(), logits.end());
          return picked < path.size() ? path[picked++] : 0;
        };
        auto drafted = chain->Propose(sequence, static_cast<int64_t>(path.size()) + 1, along);
        ASSERT_TRUE(drafted.ok()) << drafted.status();
        std::vector<int32_t> ids;
        std::vector<double> probs;
        Best(head, static_cast<int64_t>(children.size()), &ids, &probs);
        for (size_t c = 0; c < children.size(); ++c) {
          EXPECT_EQ(tree->tokens[children[c]], ids[c]) << name << " node " << node << " child " << c;
          EXPECT_EQ(tree->probs[children[c]], probs[c]) << name << " node " << node << " child " << c;
          EXPECT_EQ(tree->ranks[children[c]], static_cast<int64_t>(c));
        }
      }
    }
  }
}

// A tree drafter from a script: at every depth three siblings, one of them the reference
// continuation at a rank that rotates, and only that one gets children. The MTP drafter inside sees
// every commit, so its extends run over the committed paths too.
class ScriptedTreeDrafter : public Drafter {
 public:
  ScriptedTreeDrafter(std::vector<int32_t> reference, int64_t prompt_length, int64_t vocab, Drafter* inner)
      : reference_(std::move(reference)), prompt_length_(prompt_length), vocab_(vocab), inner_(inner) {}
  std::string name() const override { return "scripted-tree"; }
  bool can_branch() const override { return true; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first, int64_t rows, const TargetStep& step) override {
    return inner_->Observe(sequence, first, rows, step);
  }
  absl::StatusOr<Draft> Propose(std::span<const int32_t>, int64_t, const DraftSampling&) override { return Draft{}; }
  absl::StatusOr<TreeDraft> ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                        const DraftSampling& sampling) override {
    auto inner = inner_->ProposeTree(sequence, shape, sampling);  // keeps the inner cache's bookkeeping honest
    if (!inner.ok()) return inner.status();
    TreeDraft tree;
    const int64_t next = static_cast<int64_t>(sequence.size()) - prompt_length_;  // into reference_
    int32_t parent = 0;
    for (int64_t depth = 0; depth < 4 && next + depth < static_cast<int64_t>(reference_.size()); ++depth) {
      const int64_t right = calls_++ % 3;  // the rank of the right token; every 5th depth has none
      const bool none = calls_ % 5 == 0;
      int32_t right_row = -1;
      for (int64_t rank = 0; rank < 3; ++rank) {
        const int32_t good = reference_[next + depth];
        const int32_t token = (rank == right && !none) ? good : static_cast<int32_t>((good + 1 + rank) % vocab_);
        tree.tokens.push_back(token);
        tree.parents.push_back(parent);
        tree.ranks.push_back(rank);
        if (rank == right && !none) right_row = static_cast<int32_t>(tree.tokens.size());
      }
      if (right_row < 0) break;
      parent = right_row;
    }
    return tree;
  }
  void Reset() override {
    calls_ = 0;
    inner_->Reset();
  }

 private:
  std::vector<int32_t> reference_;
  int64_t prompt_length_, vocab_, calls_ = 0;
  Drafter* inner_;
};

TEST(TreeGenerateScriptedTest, TheRightSiblingAtAnyRankIsCommitted) {
  const Model& model = Load("glm_a");
  auto mtp = *MtpDrafter::Create(model, 128, MtpOptions{});
  const int64_t V = model.config().vocab_size;
  for (double temperature : {0.0, 0.9}) {
    for (int64_t length : {int64_t{4}, testing_util::SparseThreshold(model.config()) + 6}) {
      const auto prompt = TestTokens(length, V, 61);
      auto plain = GenerateWith(model, nullptr, prompt, Options(temperature, 13));
      ASSERT_TRUE(plain.ok());
      ScriptedTreeDrafter scripted(plain->tokens, length, V, mtp.get());
      auto tree = GenerateWith(model, &scripted, prompt, Options(temperature, 13, Static({3, 1, 1, 1})));
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->tokens, plain->tokens) << "T " << temperature << " prompt " << length;
      EXPECT_GE(tree->stats.num_accepted_tokens, 15);
      ASSERT_GE(tree->stats.accepted_per_rank.size(), 3u);
      for (int64_t rank = 0; rank < 3; ++rank) EXPECT_GT(tree->stats.accepted_per_rank[rank], 0) << "rank " << rank;
    }
  }
}

// Synthetic acceptance over trees (benchmarks): the chain tree 1,1,1 gives the synthetic chain's
// tokens and counts; rates of 1 for rank 0 accept every cycle to the tree's full depth; a table that
// accepts only rank 1 at the root and rank 0 below follows exactly those nodes; and the counts by
// depth and rank add up to the accepted tokens.
TEST(TreeGenerateSyntheticTest, TheTableDecidesThePath) {
  const Model& model = Load("glm_a");
  const auto prompt = TestTokens(testing_util::SparseThreshold(model.config()) + 4, model.config().vocab_size, 57);
  auto chain_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto tree_drafter = *MtpDrafter::Create(model, 128, MtpOptions{});
  auto synthetic = [](GenerateOptions o, std::vector<double> rates, std::vector<std::vector<double>> table) {
    o.accept.rule = AcceptRule::kSynthetic;
    o.accept.synthetic_rates = std::move(rates);
    o.accept.synthetic_tree_rates = std::move(table);
    return o;
  };
  auto chain = GenerateWith(model, chain_drafter.get(), prompt, synthetic(Options(0.8, 5, {}, 3), {0.7, 0.5, 0.4}, {}));
  auto tree = GenerateWith(model, tree_drafter.get(), prompt,
                           synthetic(Options(0.8, 5, Static({1, 1, 1})), {}, {{0.7}, {0.5}, {0.4}}));
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->tokens, chain->tokens);
  EXPECT_EQ(tree->stats.accepted_per_pos, chain->stats.accepted_per_pos);
  EXPECT_TRUE(tree->stats.synthetic);

  auto full = GenerateWith(model, tree_drafter.get(), prompt, synthetic(Options(0.8, 5, Static({3, 2})), {}, {{1.0}}));
  ASSERT_TRUE(full.ok()) << full.status();
  // Every cycle but a last one cut short by the token budget accepts two drafts.
  EXPECT_GE(full->stats.accepted_histogram.back(), full->stats.num_drafts - 1);
  EXPECT_EQ(full->stats.accepted_per_rank, (std::vector<int64_t>{full->stats.num_accepted_tokens}));

  auto second = GenerateWith(model, tree_drafter.get(), prompt,
                             synthetic(Options(0.8, 5, Static({3, 2})), {}, {{0.0, 1.0}, {1.0, 0.0}}));
  ASSERT_TRUE(second.ok()) << second.status();
  const auto& by_depth = second->stats.accepted_per_depth_rank;  // [depth][rank]
  ASSERT_EQ(by_depth.size(), 2u);
  EXPECT_EQ(by_depth[0], (std::vector<int64_t>{0, second->stats.num_drafts}));
  ASSERT_GE(by_depth[1].size(), 1u);
  EXPECT_GE(by_depth[1][0], second->stats.num_drafts - 1);
  int64_t total = 0;
  for (const auto& row : by_depth) total = std::accumulate(row.begin(), row.end(), total);
  EXPECT_EQ(total, second->stats.num_accepted_tokens);
}

TEST(TreeGenerateErrorsTest, CombinationsThatCannotBranchAreRefused) {
  const Model& model = Load("glm_a");
  const auto prompt = TestTokens(6, model.config().vocab_size, 71);
  auto mtp = *MtpDrafter::Create(model, 128, MtpOptions{});
  LookupDrafter lookup(LookupOptions{});
  auto message = [&](Drafter* drafter, GenerateOptions options) {
    auto result = GenerateWith(model, drafter, prompt, options);
    EXPECT_FALSE(result.ok());
    return std::string(result.status().message());
  };
  EXPECT_THAT(message(&lookup, Options(0, 0, Static({2, 2}))), HasSubstr("the lookup drafter cannot"));
  EXPECT_THAT(message(mtp.get(), Options(0, 0, Static({2, 0}))), HasSubstr("the branch at depth 2 is 0"));
  EXPECT_THAT(message(mtp.get(), Options(0, 0, Static({4, 4}))),
              HasSubstr("has 20 draft nodes; one verify holds at most 16 rows"));
  EXPECT_THAT(message(mtp.get(), Options(0, 0, Dynamic(16))), HasSubstr("has 16 draft nodes"));
  GenerateOptions relaxed = Options(0.7, 0, Static({2}));
  relaxed.accept.rule = AcceptRule::kRelaxed;
  EXPECT_THAT(message(mtp.get(), relaxed), HasSubstr("accept = relaxed does not support trees"));
  GenerateOptions sampled = Options(0.7, 0, Dynamic(8));
  sampled.sample_drafts = true;
  EXPECT_THAT(message(mtp.get(), sampled), HasSubstr("sample_drafts needs a static tree"));
  GenerateOptions adaptive = Options(0.7, 0, Static({2}), 3);
  adaptive.adaptive_k = true;
  EXPECT_THAT(message(mtp.get(), adaptive), HasSubstr("adaptive k must be off"));
}

}  // namespace
}  // namespace mtpspec
