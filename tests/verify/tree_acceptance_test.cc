// Sampler-equality over a token tree. The oracle is the target sampler itself (SampleToken, tested
// in sampler_test.cc) and the chain rule: a chain-shaped tree gives AcceptDrafts' result, and on a
// branching tree the emitted tokens are the draws plain decoding would make along the followed path.
#include "verify/tree_acceptance.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/spec/chi_square.h"
#include "core/philox.h"
#include "verify/acceptance.h"

namespace mtpspec {
namespace {

using spec_testing::ChiSquareTest;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 7;

// Deterministic, non-degenerate logits for `nodes` rows.
std::vector<float> Logits(int64_t nodes, uint64_t seed) {
  std::vector<float> logits(nodes * kVocab);  // [nodes, V]
  uint64_t s = seed;
  for (float& v : logits) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>((s >> 40) % 2001) - 1000) / 400.0f;
  }
  return logits;
}

TEST(TreeAcceptanceTest, AChainTreeGivesTheChainRule) {
  for (double temperature : {0.0, 0.7, 1.3}) {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const std::vector<float> logits = Logits(5, seed);
      SamplingParams sampling;
      sampling.temperature = temperature;
      sampling.seed = seed;
      // Drafts: the sampler's own draws for the first `agree` rows, then a wrong token.
      const int64_t agree = static_cast<int64_t>(seed % 5);
      std::vector<int32_t> drafts;
      for (int64_t j = 0; j < 4; ++j) {
        const int32_t draw = SampleToken(logits.data() + j * kVocab, kVocab, sampling, 30 + j);
        drafts.push_back(j < agree ? draw : (draw + 1) % kVocab);
      }
      VerifyBlock chain{logits.data(), kVocab, drafts, nullptr, 30};
      AcceptParams params;
      params.sampling = sampling;
      const AcceptResult expected = AcceptDrafts(chain, params);

      std::vector<int32_t> tokens = {99};  // the root's token is never read
      tokens.insert(tokens.end(), drafts.begin(), drafts.end());
      const std::vector<int32_t> parents = {-1, 0, 1, 2, 3};
      auto tree = AcceptTreeBySamplerEquality({logits.data(), kVocab, tokens, parents, 30, {}}, sampling);
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->accepted, expected.accepted) << "T " << temperature << " seed " << seed;
      EXPECT_THAT(tree->tokens, ElementsAreArray(expected.tokens));
      ASSERT_EQ(static_cast<int64_t>(tree->path.size()), tree->accepted + 1);
      for (int64_t i = 0; i <= tree->accepted; ++i) EXPECT_EQ(tree->path[i], i);
    }
  }
}

// Root with three children (one per candidate token), each with one child. Whichever child holds
// the root row's draw is followed; then that child's row decides.
TEST(TreeAcceptanceTest, TheChildThatEqualsTheDrawIsFollowed) {
  const std::vector<int32_t> parents = {-1, 0, 0, 0, 1, 2, 3};
  for (double temperature : {0.0, 1.0}) {
    for (uint64_t seed = 0; seed < 60; ++seed) {
      const std::vector<float> logits = Logits(7, seed + 100);
      SamplingParams sampling;
      sampling.temperature = temperature;
      sampling.seed = seed;
      const int32_t first = SampleToken(logits.data(), kVocab, sampling, 50);
      // Children 1..3 hold first − 1, first, first + 1 rotated by the seed, so the draw sits at
      // any sibling rank, or (every fourth seed) at none.
      std::vector<int32_t> tokens(7, 0);
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t shift = (seed % 4 == 3) ? 3 + c : static_cast<int64_t>((c + seed) % 3);
        tokens[1 + c] = static_cast<int32_t>((first + kVocab - 1 + shift) % kVocab);
      }
      for (int64_t g = 4; g < 7; ++g) {  // grandchildren: the draw of their parent's row for even seeds
        const int32_t draw = SampleToken(logits.data() + parents[g] * kVocab, kVocab, sampling, 51);
        tokens[g] = seed % 2 == 0 ? draw : (draw + 2) % kVocab;
      }
      auto result = AcceptTreeBySamplerEquality({logits.data(), kVocab, tokens, parents, 50, {}}, sampling);
      ASSERT_TRUE(result.ok());
      int64_t child = -1;
      for (int64_t c = 1; c <= 3; ++c) {
        if (tokens[c] == first && child < 0) child = c;
      }
      if (child < 0) {
        EXPECT_EQ(result->accepted, 0);
        EXPECT_THAT(result->tokens, ElementsAreArray({first}));
        continue;
      }
      const int32_t second = SampleToken(logits.data() + child * kVocab, kVocab, sampling, 51);
      const int64_t grandchild = child + 3;
      if (tokens[grandchild] == second) {
        const int32_t third = SampleToken(logits.data() + grandchild * kVocab, kVocab, sampling, 52);
        EXPECT_THAT(result->path, ElementsAreArray({int64_t{0}, child, grandchild}));
        EXPECT_THAT(result->tokens, ElementsAreArray({first, second, third}));
      } else {
        EXPECT_THAT(result->path, ElementsAreArray({int64_t{0}, child}));
        EXPECT_THAT(result->tokens, ElementsAreArray({first, second}));
      }
    }
  }
}

TEST(TreeRejectionTest, AChainTreeGivesTheChainRule) {
  for (double temperature : {0.0, 0.6, 1.2}) {
    for (uint64_t seed = 0; seed < 60; ++seed) {
      const std::vector<float> logits = Logits(5, seed + 300);
      std::vector<int32_t> drafts;
      for (int64_t j = 0; j < 4; ++j) drafts.push_back(static_cast<int32_t>((seed * 7 + j * 3) % kVocab));
      AcceptParams params;
      params.rule = AcceptRule::kRejection;
      params.sampling.temperature = temperature;
      params.sampling.seed = seed;
      const AcceptResult expected = AcceptDrafts(VerifyBlock{logits.data(), kVocab, drafts, nullptr, 40}, params);
      std::vector<int32_t> tokens = {0};
      tokens.insert(tokens.end(), drafts.begin(), drafts.end());
      const std::vector<int32_t> parents = {-1, 0, 1, 2, 3};
      auto tree = AcceptTreeByRejection({logits.data(), kVocab, tokens, parents, 40, {}}, params.sampling);
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->accepted, expected.accepted) << "T " << temperature << " seed " << seed;
      EXPECT_THAT(tree->tokens, ElementsAreArray(expected.tokens)) << "T " << temperature << " seed " << seed;
    }
  }
}

// A toy target over 5 tokens for the distribution tests: the root's row, the row after each
// first token x1, and at `sampling` the exact p1 and p1 · p2(· | x1). Count() records what one
// acceptance emitted (the second token drawn by the next cycle's sampler when it emitted one only);
// Check() compares the counts with p1 and the joint by chi-square.
class TwoTokenTarget {
 public:
  static constexpr int64_t V = 5;
  explicit TwoTokenTarget(const SamplingParams& sampling) {
    SamplingDistribution(first_.data(), V, sampling, &p1_);
    std::vector<double> p2;
    for (int64_t a = 0; a < V; ++a) {
      const std::vector<float> row = SecondRow(a);
      SamplingDistribution(row.data(), V, sampling, &p2);
      for (int64_t b = 0; b < V; ++b) joint_[a * V + b] = p1_[a] * p2[b];
    }
  }
  static std::vector<float> SecondRow(int64_t x1) {  // [V] the target's row after token x1
    std::vector<float> row(V);
    for (int64_t v = 0; v < V; ++v) row[v] = 0.35f * static_cast<float>((v * (x1 + 2)) % V) - 0.2f * static_cast<float>(v == x1);
    return row;
  }
  // [nodes, V]: row 0 the root's, row i the target's row after tokens[i].
  std::vector<float> Logits(const std::vector<int32_t>& tokens) const {
    std::vector<float> logits(first_);
    for (size_t i = 1; i < tokens.size(); ++i) {
      const std::vector<float> row = SecondRow(tokens[i]);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    return logits;
  }
  void Count(const TreeAcceptResult& r, const SamplingParams& sampling, int64_t second_position) {
    const int32_t x1 = r.tokens[0];
    const std::vector<float> row = SecondRow(x1);
    const int32_t x2 = r.tokens.size() > 1 ? r.tokens[1] : SampleToken(row.data(), V, sampling, second_position);
    ++first_counts_[x1];
    ++joint_counts_[x1 * V + x2];
    ++trials_;
    accepted_twice_ += r.accepted == 2;
    accepted_off_first_ += r.accepted >= 1 && r.path[1] != 1;
  }
  // Also that the trials reached the second depth and accepted siblings after the first.
  void Check() const {
    const auto chi_first = ChiSquareTest(first_counts_, p1_);
    EXPECT_GT(chi_first.p_value, 0.001) << chi_first.detail;
    const auto chi_joint = ChiSquareTest(joint_counts_, joint_);
    EXPECT_GT(chi_joint.p_value, 0.001) << chi_joint.detail;
    EXPECT_GT(accepted_twice_, trials_ / 20);
    EXPECT_GT(accepted_off_first_, trials_ / 20);
  }
  const std::vector<double>& p1() const { return p1_; }

 private:
  const std::vector<float> first_ = {0.4f, 1.1f, -0.3f, 0.8f, 0.2f};  // [V] the root's row
  std::vector<double> p1_, joint_ = std::vector<double>(V * V);      // [V], [x1, x2]
  std::vector<int64_t> first_counts_ = std::vector<int64_t>(V, 0), joint_counts_ = std::vector<int64_t>(V * V, 0);
  int64_t trials_ = 0, accepted_twice_ = 0, accepted_off_first_ = 0;
};

// Lossless in distribution: over 10^5 seeds, the first emitted token follows p1 and the second
// follows p2(· | first), whether they came from accepted siblings, a residual draw or a bonus. The
// tree: three root children (tokens 1, 3, 4), each with two children (tokens that overlap the
// likely ones and not).
TEST(TreeRejectionTest, EmittedTokensFollowTheTargetDistribution) {
  SamplingParams sampling;
  sampling.temperature = 0.9;
  TwoTokenTarget target(sampling);
  const std::vector<int32_t> tokens = {0, 1, 3, 4, 1, 2, 0, 3, 4, 1};
  const std::vector<int32_t> parents = {-1, 0, 0, 0, 1, 1, 2, 2, 3, 3};
  const std::vector<float> logits = target.Logits(tokens);  // [10, V]
  constexpr int64_t kTrials = 100000;
  for (int64_t t = 0; t < kTrials; ++t) {
    sampling.seed = 1000 + static_cast<uint64_t>(t);
    auto r = AcceptTreeByRejection({logits.data(), TwoTokenTarget::V, tokens, parents, 70, {}}, sampling);
    ASSERT_TRUE(r.ok());
    target.Count(*r, sampling, 71);
  }
  target.Check();
}

// A softmax at T = 1 of deterministic logits: a draft distribution q with full support. [V]
std::vector<double> DraftDistribution(int64_t vocab, uint64_t seed) {
  const std::vector<float> logits = Logits(1, seed);
  std::vector<double> q(vocab);
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += q[v] = std::exp(static_cast<double>(logits[v % kVocab]) * 0.8);
  for (double& x : q) x /= total;
  return q;
}

TEST(TreeRejectionTest, ASampledChainTreeGivesTheChainRuleWithItsDraftDistributions) {
  for (double temperature : {0.6, 1.0, 1.4}) {
    for (uint64_t seed = 0; seed < 60; ++seed) {
      const std::vector<float> logits = Logits(5, seed + 500);
      std::vector<std::vector<double>> q;  // [4][V]
      std::vector<int32_t> drafts;
      for (int64_t j = 0; j < 4; ++j) {
        q.push_back(DraftDistribution(kVocab, seed * 11 + j));
        drafts.push_back(DrawFrom(q.back(), UniformAt(seed, 40 + j, 1)));
      }
      AcceptParams params;
      params.rule = AcceptRule::kRejection;
      params.sampling.temperature = temperature;
      params.sampling.seed = seed;
      const AcceptResult expected = AcceptDrafts(VerifyBlock{logits.data(), kVocab, drafts, &q, 40}, params);
      std::vector<int32_t> tokens = {0};
      tokens.insert(tokens.end(), drafts.begin(), drafts.end());
      const std::vector<int32_t> parents = {-1, 0, 1, 2, 3};
      std::vector<std::vector<double>> per_node = q;  // [5] node i's children drawn from q[i]
      per_node.emplace_back();                        // the leaf has none
      TreeVerifyBlock block{logits.data(), kVocab, tokens, parents, 40, {}};
      block.draft_probs = per_node;
      auto tree = AcceptTreeByRejection(block, params.sampling);
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->accepted, expected.accepted) << "T " << temperature << " seed " << seed;
      EXPECT_THAT(tree->tokens, ElementsAreArray(expected.tokens)) << "T " << temperature << " seed " << seed;
    }
  }
}

// Lossless in distribution with sampled drafts: each trial draws the root's three children from q
// without replacement and each child's two children from its own q, then accepts; over 10^5
// trials the first emitted token follows p1 and the pair follows p1 · p2(· | first).
TEST(TreeRejectionTest, SampledSiblingsKeepTheTargetDistribution) {
  constexpr int64_t V = TwoTokenTarget::V;
  SamplingParams sampling;
  sampling.temperature = 0.9;
  TwoTokenTarget target(sampling);
  // Draft distributions unlike the target's: the root's favours tokens 2 and 4, a child's depends on it.
  const std::vector<double> q_root = {0.1, 0.15, 0.35, 0.1, 0.3};
  auto q_after = [](int64_t x1) {
    std::vector<double> q(V);
    double total = 0;
    for (int64_t v = 0; v < V; ++v) total += q[v] = 1.0 + static_cast<double>((v + 2 * x1) % V);
    for (double& x : q) x /= total;
    return q;
  };
  constexpr int64_t kTrials = 100000;
  for (int64_t t = 0; t < kTrials; ++t) {
    const uint64_t draft_seed = 77'000'000 + static_cast<uint64_t>(t);
    std::vector<double> u;
    for (int i = 0; i < 3; ++i) u.push_back(UniformAt(draft_seed, 0, static_cast<uint32_t>(i)));
    const std::vector<int32_t> children = DrawWithoutReplacement(q_root, u);
    std::vector<int32_t> tokens = {0};
    std::vector<int32_t> parents = {-1};
    std::vector<std::vector<double>> q = {q_root};
    for (int32_t c : children) {
      tokens.push_back(c);
      parents.push_back(0);
      q.push_back(q_after(c));
    }
    for (size_t i = 0; i < children.size(); ++i) {
      u.clear();
      for (int j = 0; j < 2; ++j) u.push_back(UniformAt(draft_seed, 1 + i, static_cast<uint32_t>(j)));
      for (int32_t g : DrawWithoutReplacement(q[i + 1], u)) {
        tokens.push_back(g);
        parents.push_back(static_cast<int32_t>(i + 1));
        q.emplace_back();  // leaves
      }
    }
    const std::vector<float> logits = target.Logits(tokens);  // [nodes, V]
    sampling.seed = 1000 + static_cast<uint64_t>(t);
    TreeVerifyBlock block{logits.data(), V, tokens, parents, 70, {}};
    block.draft_probs = q;
    auto r = AcceptTreeByRejection(block, sampling);
    ASSERT_TRUE(r.ok()) << r.status();
    target.Count(*r, sampling, 71);
  }
  target.Check();
}

// The distributions must be the ones the children were drawn from: the same draws from q_root
// accepted as if drawn from a uniform q move the first token's distribution away from p1 (so the
// chi-square check above can fail); and a q equal to the target's accepts the first child always.
TEST(TreeRejectionTest, TheDraftDistributionMustBeTheOneDrawnFrom) {
  constexpr int64_t V = TwoTokenTarget::V;
  const std::vector<double> q_root = {0.1, 0.15, 0.35, 0.1, 0.3};
  SamplingParams sampling;
  sampling.temperature = 0.9;
  const TwoTokenTarget target(sampling);
  const std::vector<double>& p1 = target.p1();
  constexpr int64_t kTrials = 20000;
  std::vector<int64_t> counts(V, 0);
  int64_t first_child_accepted = 0;
  for (int64_t t = 0; t < kTrials; ++t) {
    std::vector<double> u;
    for (int i = 0; i < 2; ++i) u.push_back(UniformAt(5'000 + static_cast<uint64_t>(t), 0, static_cast<uint32_t>(i)));
    sampling.seed = static_cast<uint64_t>(t);
    for (const bool wrong : {true, false}) {
      const std::vector<double>& drawn_from = wrong ? q_root : p1;
      std::vector<int32_t> tokens = {0};
      std::vector<int32_t> parents = {-1};
      for (int32_t c : DrawWithoutReplacement(drawn_from, u)) {
        tokens.push_back(c);
        parents.push_back(0);
      }
      const std::vector<float> logits = target.Logits(tokens);  // [nodes, V]
      std::vector<std::vector<double>> q(tokens.size());
      q[0] = wrong ? std::vector<double>(V, 1.0 / V) : p1;
      TreeVerifyBlock block{logits.data(), V, tokens, parents, 3, {}};
      block.draft_probs = q;
      auto r = AcceptTreeByRejection(block, sampling);
      ASSERT_TRUE(r.ok()) << r.status();
      if (wrong) {
        ++counts[r->tokens[0]];
      } else {
        first_child_accepted += r->accepted == 1 && r->path[1] == 1;
      }
    }
  }
  EXPECT_LT(ChiSquareTest(counts, p1).p_value, 1e-6);
  EXPECT_EQ(first_child_accepted, kTrials);
}

TEST(TreeRejectionTest, InconsistentDraftDistributionsAreErrors) {
  const std::vector<float> logits = Logits(3, 2);
  const std::vector<int32_t> tokens = {0, 1, 2};
  const std::vector<int32_t> parents = {-1, 0, 0};
  SamplingParams sampling;
  sampling.temperature = 1.0;
  std::vector<std::vector<double>> too_few = {DraftDistribution(kVocab, 1)};
  TreeVerifyBlock block{logits.data(), kVocab, tokens, parents, 0, {}};
  block.draft_probs = too_few;
  EXPECT_THAT(std::string(AcceptTreeByRejection(block, sampling).status().message()),
              HasSubstr("1 draft distributions for 3 nodes"));
  std::vector<std::vector<double>> short_row = {std::vector<double>(3, 0.3), {}, {}};
  block.draft_probs = short_row;
  EXPECT_THAT(std::string(AcceptTreeByRejection(block, sampling).status().message()),
              HasSubstr("draft_probs[0] has 3 entries for a vocabulary of 7"));
  std::vector<double> no_mass(kVocab, 0.0);
  no_mass[1] = 1.0;  // token 2, the second child, cannot have been drawn
  std::vector<std::vector<double>> impossible = {no_mass, {}, {}};
  block.draft_probs = impossible;
  // The first child (token 1) is then the only draw possible; the test reaches the second only if
  // the first is rejected, so try seeds until one is.
  bool named = false;
  for (uint64_t seed = 0; seed < 200 && !named; ++seed) {
    sampling.seed = seed;
    auto r = AcceptTreeByRejection(block, sampling);
    if (!r.ok()) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr("node 2 (token 2) has no mass"));
      named = true;
    }
  }
  EXPECT_TRUE(named);
}

// Synthetic tree acceptance (benchmarks only): a chain-shaped tree gives the chain's synthetic rule,
// with the rates from synthetic_rates or from the table's rank-0 column.
TEST(TreeSyntheticTest, AChainTreeGivesTheChainRule) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> logits = Logits(5, seed);
    AcceptParams chain_params;
    chain_params.rule = AcceptRule::kSynthetic;
    chain_params.sampling.temperature = seed % 2 == 0 ? 0.0 : 0.8;
    chain_params.sampling.seed = seed;
    chain_params.synthetic_rates = {0.9, 0.7, 0.5};  // the last also for position 4
    const std::vector<int32_t> drafts = {1, 2, 3, 4};
    const AcceptResult expected = AcceptDrafts({logits.data(), kVocab, drafts, nullptr, 12}, chain_params);
    const std::vector<int32_t> tokens = {0, 1, 2, 3, 4};
    const std::vector<int32_t> parents = {-1, 0, 1, 2, 3};
    AcceptParams table_params = chain_params;
    table_params.synthetic_rates.clear();
    table_params.synthetic_tree_rates = {{0.9, 0.3}, {0.7}, {0.5, 0.2}};
    for (const AcceptParams* params : {&chain_params, &table_params}) {
      auto tree = AcceptTreeSynthetic({logits.data(), kVocab, tokens, parents, 12, {}}, *params);
      ASSERT_TRUE(tree.ok()) << tree.status();
      EXPECT_EQ(tree->accepted, expected.accepted) << "seed " << seed;
      EXPECT_THAT(tree->tokens, ElementsAreArray(expected.tokens)) << "seed " << seed;
    }
  }
}

// The followed path is drawn with the table's conditional rates: on the tree 2,2 the seven
// outcomes (no child, child a, child a then child b, ...) have the closed-form probabilities of
// trying siblings in rank order, checked by chi-square over 10^5 seeds; the emitted tokens are the
// path's drafts, then the target's draw from the last node's row.
TEST(TreeSyntheticTest, PathsFollowTheTableOfRates) {
  const std::vector<float> logits = Logits(7, 3);
  const std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 2};  // root: 1, 2; node 1: 3, 4; node 2: 5, 6
  AcceptParams params;
  params.rule = AcceptRule::kSynthetic;
  params.synthetic_tree_rates = {{0.6, 0.5}, {0.3, 0.25}};
  // Outcome index: the last node of the path (0 … 6).
  const double p1 = 0.6, p2 = 0.4 * 0.5, q0 = 0.3, q1 = 0.7 * 0.25;
  const std::vector<double> expected = {1 - p1 - p2,       p1 * (1 - q0 - q1), p2 * (1 - q0 - q1),
                                        p1 * q0, p1 * q1, p2 * q0,           p2 * q1};
  std::vector<int64_t> counts(7, 0);
  for (uint64_t seed = 0; seed < 100'000; ++seed) {
    params.sampling.seed = seed;
    params.sampling.temperature = 1.0;
    auto r = AcceptTreeSynthetic({logits.data(), kVocab, tokens, parents, 40, {}}, params);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->path.size(), static_cast<size_t>(r->accepted + 1));
    ASSERT_EQ(r->tokens.size(), r->path.size());
    for (int64_t j = 1; j <= r->accepted; ++j) {
      ASSERT_EQ(parents[r->path[j]], r->path[j - 1]);
      ASSERT_EQ(r->tokens[j - 1], tokens[r->path[j]]);
    }
    const int64_t last = r->path.back();
    ASSERT_EQ(r->tokens.back(), SampleToken(logits.data() + last * kVocab, kVocab, params.sampling, 40 + r->accepted));
    ++counts[last];
  }
  const auto chi = ChiSquareTest(counts, expected);
  EXPECT_GT(chi.p_value, 0.001) << chi.detail;
  // And the rates matter: the same counts are far from a table with the ranks swapped.
  const std::vector<double> swapped = {1 - 0.5 - 0.5 * 0.6, 0.5 * (1 - 0.25 - 0.75 * 0.3), 0.3 * (1 - 0.25 - 0.75 * 0.3),
                                       0.5 * 0.25, 0.5 * 0.75 * 0.3, 0.3 * 0.25, 0.3 * 0.75 * 0.3};
  EXPECT_LT(ChiSquareTest(counts, swapped).p_value, 1e-6);
}

TEST(TreeAcceptanceTest, BadTreesAreErrors) {
  const std::vector<float> logits = Logits(3, 1);
  const std::vector<int32_t> tokens = {0, 1, 2};
  SamplingParams sampling;
  auto bad_root =
      AcceptTreeBySamplerEquality({logits.data(), kVocab, tokens, std::vector<int32_t>{0, 0, 1}, 0, {}}, sampling);
  EXPECT_THAT(std::string(bad_root.status().message()), HasSubstr("parents[0] = -1"));
  auto forward =
      AcceptTreeBySamplerEquality({logits.data(), kVocab, tokens, std::vector<int32_t>{-1, 2, 0}, 0, {}}, sampling);
  EXPECT_THAT(std::string(forward.status().message()), HasSubstr("parents[1] = 2 must name an earlier node"));
  auto short_parents =
      AcceptTreeBySamplerEquality({logits.data(), kVocab, tokens, std::vector<int32_t>{-1}, 0, {}}, sampling);
  EXPECT_FALSE(short_parents.ok());
}

}  // namespace
}  // namespace mtpspec
