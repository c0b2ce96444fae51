// The lossless claim, statistically. A toy target (vocabulary 8) whose logits depend only on the
// absolute position, so the emitted token at every position must follow softmax(logits / T) of that
// position, independently of the other positions, whatever the drafts were. The draft
// distribution q is fixed and deliberately different from the target's.
//
// Each request has a 3-token prompt and 4 new tokens with k = 2: token 0 (position 3) comes from
// the prefill; the first verify block drafts positions 4 and 5, so token 1 is an accepted draft, a
// correction or a residual sample, and token 2 comes from the same block when the first draft was
// accepted and from the next block otherwise. Over 10^5 requests (a distinct seed per request) the
// counts of each token and of each consecutive pair of tokens are compared with the target
// distribution (the pairs with the product distribution) by Pearson's chi-square test
// (chi_square.h), requiring p > 0.01.
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/generator.h"
#include "tests/spec/chi_square.h"
#include "tests/spec/fake_models.h"

namespace mtpspec {
namespace {

using spec_testing::ChiSquareSurvival;
using spec_testing::ChiSquareTest;
using spec_testing::DistributionDrafter;
using spec_testing::FakeTarget;
using spec_testing::Softmax;

constexpr int64_t kVocab = 8;
constexpr int64_t kPrompt = 3;
constexpr int64_t kTrials = 100000;

// Target logits for positions 3..6 (anything else: flat).
std::vector<float> TargetLogits(int64_t position) {
  switch (position) {
    case 3: return {0.2f, -0.3f, 0.9f, 0.1f, -0.8f, 0.4f, 0.0f, -0.1f};
    case 4: return {1.2f, 0.3f, -0.5f, 0.8f, 0.0f, -1.0f, 0.5f, -0.2f};
    case 5: return {-0.4f, 0.9f, 0.1f, -0.7f, 1.3f, 0.2f, -0.6f, 0.7f};
    case 6: return {0.3f, 0.3f, -0.2f, 0.6f, -0.7f, 1.0f, 0.1f, -0.4f};
    default: return std::vector<float>(kVocab, 0.0f);
  }
}

// The draft distribution: a different softmax at positions 4 and 5, uniform elsewhere.
std::vector<double> DraftDistribution(int64_t position) {
  switch (position) {
    case 4: return Softmax({0.1f, 1.1f, -0.2f, 0.4f, 0.6f, -0.6f, 0.2f, 0.0f});
    case 5: return Softmax({0.8f, 0.2f, 0.5f, -0.3f, 0.4f, 0.9f, -0.5f, 0.1f});
    default: return std::vector<double>(kVocab, 1.0 / kVocab);
  }
}

// The target's expected distribution at `position` for temperature T (float64, independent of the
// sampler's implementation).
std::vector<double> Expected(int64_t position, double temperature) {
  return Softmax(TargetLogits(position), temperature);
}

struct Counts {
  std::vector<std::vector<int64_t>> by_token = std::vector<std::vector<int64_t>>(4, std::vector<int64_t>(kVocab, 0));
  // Consecutive pairs (token i, token i + 1), i = 0, 1, 2.
  std::vector<std::vector<int64_t>> pairs =
      std::vector<std::vector<int64_t>>(3, std::vector<int64_t>(kVocab * kVocab, 0));
  SpecStats stats;
};

// Request t uses seed seed_base + t; every test has its own range of seeds, so no two tests share
// their randomness.
Counts RunRequests(AcceptRule rule, bool sample_drafts, double temperature, uint64_t seed_base,
                   int64_t trials = kTrials) {
  // The tables are looked up per row, so precompute them once.
  std::vector<std::vector<float>> logits_table;
  std::vector<std::vector<double>> q_table;
  for (int64_t p = 0; p < 32; ++p) {
    logits_table.push_back(TargetLogits(p));
    q_table.push_back(DraftDistribution(p));
  }
  FakeTarget target(kVocab, 16, [&](int64_t p) { return logits_table[p]; });
  DistributionDrafter drafter([&](int64_t p) { return q_table[p]; });
  GenerateOptions options;
  options.k = 2;
  options.max_new_tokens = 4;
  options.accept.rule = rule;
  options.accept.sampling.temperature = temperature;
  options.accept.synthetic_rates = {1.0};
  options.sample_drafts = sample_drafts;
  const std::vector<int32_t> prompt = {0, 1, 2};
  Counts counts;
  for (int64_t t = 0; t < trials; ++t) {
    options.accept.sampling.seed = seed_base + static_cast<uint64_t>(t);
    auto r = Generate(target, &drafter, prompt, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->tokens.size() != 4) {
      ADD_FAILURE() << "request " << t << " emitted " << (r.ok() ? r->tokens.size() : 0) << " tokens";
      return counts;
    }
    for (int i = 0; i < 4; ++i) ++counts.by_token[i][r->tokens[i]];
    for (int i = 0; i < 3; ++i) ++counts.pairs[i][r->tokens[i] * kVocab + r->tokens[i + 1]];
    counts.stats.Merge(r->stats);
  }
  return counts;
}

std::vector<double> Product(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out;
  for (double x : a) {
    for (double y : b) out.push_back(x * y);
  }
  return out;
}

void ExpectTargetDistribution(const Counts& counts, double temperature, const std::string& label) {
  for (int i = 0; i < 4; ++i) {
    const auto chi = ChiSquareTest(counts.by_token[i], Expected(kPrompt + i, temperature));
    EXPECT_EQ(chi.df, kVocab - 1);
    EXPECT_GT(chi.p_value, 0.01) << label << ": token " << i << " (position " << kPrompt + i << ") chi2 "
                                 << chi.statistic << "\n"
                                 << chi.detail;
  }
  // Independence: each consecutive pair fits the product of the two target distributions. These three
  // extra tests per configuration use p > 0.001 (a Bonferroni-style allowance for running 35
  // chi-square tests in this file); the per-token tests above keep p > 0.01.
  for (int i = 0; i < 3; ++i) {
    const auto joint =
        ChiSquareTest(counts.pairs[i], Product(Expected(kPrompt + i, temperature), Expected(kPrompt + i + 1, temperature)));
    EXPECT_EQ(joint.df, kVocab * kVocab - 1);
    EXPECT_GT(joint.p_value, 0.001) << label << ": pair (token " << i << ", token " << i + 1 << ") chi2 "
                                   << joint.statistic;
  }
}

// The chain was exercised both ways: some first blocks accepted their first draft (token 2 came from
// the same block) and some rejected it (token 2 came from a new block).
void ExpectBothPaths(const Counts& counts, const std::string& label) {
  const SpecStats& s = counts.stats;
  ASSERT_GE(s.accepted_histogram.size(), 2u) << label;
  EXPECT_GT(s.accepted_histogram[0], kTrials / 50) << label;
  int64_t at_least_one = 0;
  for (size_t m = 1; m < s.accepted_histogram.size(); ++m) at_least_one += s.accepted_histogram[m];
  EXPECT_GT(at_least_one, kTrials / 50) << label;
}

// --- the chi-square machinery itself ------------------------------------------------------------

TEST(DistributionTest, ChiSquareSurvivalMatchesClosedForms) {
  for (double x : {0.1, 0.5, 1.0, 3.0, 7.5, 15.0, 40.0, 80.0, 120.0}) {
    // df = 1: P(Z² > x) = erfc(√(x/2)).
    EXPECT_NEAR(ChiSquareSurvival(x, 1), std::erfc(std::sqrt(x / 2)), 1e-12) << x;
    // Even df = 2m: e^{-x/2} Σ_{i<m} (x/2)^i / i!.
    for (int m : {1, 3, 7, 32}) {
      double term = 1, sum = 0;
      for (int i = 0; i < m; ++i) {
        sum += term;
        term *= (x / 2) / (i + 1);
      }
      const double expected = std::exp(-x / 2) * sum;
      EXPECT_NEAR(ChiSquareSurvival(x, 2 * m), expected, 1e-12 + 1e-10 * expected) << "x " << x << " df " << 2 * m;
    }
  }
  // Table values: the 5% point of χ²(1) and the 1% point of χ²(7).
  EXPECT_NEAR(ChiSquareSurvival(3.841458820694124, 1), 0.05, 1e-9);
  EXPECT_NEAR(ChiSquareSurvival(18.475306906582357, 7), 0.01, 1e-9);
}

// --- first token, straight through AcceptDrafts -------------------------------------------------

// One verify block per trial (k = 2, rows for positions 4, 5, 6) with drafts from q; the first
// emitted token must follow the target at position 4.
void CheckFirstTokenOfABlock(AcceptRule rule, bool sampled_drafts, double temperature, uint64_t seed_base) {
  std::vector<float> logits;
  for (int64_t p = 4; p <= 6; ++p) {
    const auto row = TargetLogits(p);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const std::vector<std::vector<double>> q = {DraftDistribution(4), DraftDistribution(5)};
  std::vector<int64_t> counts(kVocab, 0);
  int64_t accepted = 0;
  for (int64_t t = 0; t < kTrials; ++t) {
    AcceptParams params;
    params.rule = rule;
    params.sampling.temperature = temperature;
    params.sampling.seed = seed_base + static_cast<uint64_t>(t);
    std::vector<int32_t> drafts;
    for (int64_t j = 0; j < 2; ++j) {
      const double u = UniformAt(params.sampling.seed, 4 + j, static_cast<uint32_t>(RngStream::kDraft));
      drafts.push_back(sampled_drafts ? DrawFrom(q[j], u)
                                      : static_cast<int32_t>(std::max_element(q[j].begin(), q[j].end()) - q[j].begin()));
    }
    VerifyBlock block;
    block.target_logits = logits.data();
    block.vocab = kVocab;
    block.drafts = drafts;
    block.draft_probs = sampled_drafts ? &q : nullptr;
    block.first_position = 4;
    const AcceptResult r = AcceptDrafts(block, params);
    ++counts[r.tokens[0]];
    accepted += r.accepted > 0;
  }
  const auto chi = ChiSquareTest(counts, Expected(4, temperature));
  EXPECT_GT(chi.p_value, 0.01) << AcceptRuleName(rule) << " T=" << temperature << " chi2 " << chi.statistic << "\n"
                               << chi.detail;
  EXPECT_GT(accepted, kTrials / 50);
  EXPECT_LT(accepted, kTrials - kTrials / 50);
}

TEST(DistributionTest, FirstTokenOfABlockFollowsTheTarget) {
  uint64_t seed_base = 100'000'000;
  for (double temperature : {0.6, 1.0}) {
    CheckFirstTokenOfABlock(AcceptRule::kSamplerEquality, /*sampled_drafts=*/false, temperature, seed_base += 1'000'000);
    CheckFirstTokenOfABlock(AcceptRule::kRejection, /*sampled_drafts=*/true, temperature, seed_base += 1'000'000);
    CheckFirstTokenOfABlock(AcceptRule::kRejection, /*sampled_drafts=*/false, temperature, seed_base += 1'000'000);
  }
}

// --- the chain through Generate -----------------------------------------------------------------

TEST(DistributionTest, SamplerEqualityWithArgmaxDraftsIsLosslessAtT06) {
  const Counts counts = RunRequests(AcceptRule::kSamplerEquality, /*sample_drafts=*/false, 0.6, 1'000'000);
  ExpectTargetDistribution(counts, 0.6, "sampler-equality T=0.6");
  ExpectBothPaths(counts, "sampler-equality T=0.6");
}

TEST(DistributionTest, SamplerEqualityWithArgmaxDraftsIsLosslessAtT1) {
  const Counts counts = RunRequests(AcceptRule::kSamplerEquality, /*sample_drafts=*/false, 1.0, 2'000'000);
  ExpectTargetDistribution(counts, 1.0, "sampler-equality T=1");
  ExpectBothPaths(counts, "sampler-equality T=1");
}

TEST(DistributionTest, RejectionWithSampledDraftsIsLosslessAtT06) {
  const Counts counts = RunRequests(AcceptRule::kRejection, /*sample_drafts=*/true, 0.6, 3'000'000);
  ExpectTargetDistribution(counts, 0.6, "rejection T=0.6");
  ExpectBothPaths(counts, "rejection T=0.6");
}

TEST(DistributionTest, RejectionWithSampledDraftsIsLosslessAtT1) {
  const Counts counts = RunRequests(AcceptRule::kRejection, /*sample_drafts=*/true, 1.0, 4'000'000);
  ExpectTargetDistribution(counts, 1.0, "rejection T=1");
  ExpectBothPaths(counts, "rejection T=1");
}

// vLLM's configuration: greedy drafts, rejection sampling with q treated as one-hot.
TEST(DistributionTest, RejectionWithArgmaxDraftsIsLosslessAtT1) {
  const Counts counts = RunRequests(AcceptRule::kRejection, /*sample_drafts=*/false, 1.0, 5'000'000);
  ExpectTargetDistribution(counts, 1.0, "rejection, argmax drafts, T=1");
  ExpectBothPaths(counts, "rejection, argmax drafts, T=1");
}

// The same test has the power to see a lossy rule: synthetic acceptance at rate 1 emits the
// q-sampled drafts themselves, which follow q, not the target.
TEST(DistributionTest, TheTestDetectsALossyRule) {
  const Counts counts = RunRequests(AcceptRule::kSynthetic, /*sample_drafts=*/true, 1.0, 6'000'000, kTrials / 5);
  const auto chi = ChiSquareTest(counts.by_token[1], Expected(4, 1.0));
  EXPECT_LT(chi.p_value, 1e-6) << "chi2 " << chi.statistic;
  const auto as_q = ChiSquareTest(counts.by_token[1], DraftDistribution(4));
  EXPECT_GT(as_q.p_value, 1e-4) << "the drafts follow q: chi2 " << as_q.statistic;
}

// --- acceptance rates: Σ min(p, q) for rejection vs Σ p·q for sampler-equality -------------------

TEST(DistributionTest, RejectionAcceptsMoreThanSamplerEqualityWithSampledDrafts) {
  const double temperature = 1.0;
  const std::vector<float> row = TargetLogits(4);
  const std::vector<double> p = Expected(4, temperature);
  // q close to p: the target logits slightly perturbed.
  std::vector<float> perturbed = row;
  for (int64_t v = 0; v < kVocab; ++v) perturbed[v] += 0.15f * static_cast<float>((v % 3) - 1);
  const std::vector<double> q = Softmax(perturbed);
  double min_sum = 0, product_sum = 0;
  for (int64_t v = 0; v < kVocab; ++v) {
    min_sum += std::min(p[v], q[v]);
    product_sum += p[v] * q[v];
  }
  ASSERT_GT(min_sum, 0.9);  // q really is close to p
  const std::vector<float> logits = [&] {
    std::vector<float> both = row;
    both.insert(both.end(), row.begin(), row.end());  // the bonus row (unused here)
    return both;
  }();
  const std::vector<std::vector<double>> draft_probs = {q};
  int64_t accepted_rejection = 0, accepted_equality = 0;
  for (int64_t t = 0; t < kTrials; ++t) {
    const uint64_t seed = 200'000'000 + static_cast<uint64_t>(t);
    const int32_t draft = DrawFrom(q, UniformAt(seed, 50, static_cast<uint32_t>(RngStream::kDraft)));
    const std::vector<int32_t> drafts = {draft};
    VerifyBlock block;
    block.target_logits = logits.data();
    block.vocab = kVocab;
    block.drafts = drafts;
    block.first_position = 50;
    AcceptParams params;
    params.sampling.temperature = temperature;
    params.sampling.seed = seed;
    params.rule = AcceptRule::kRejection;
    block.draft_probs = &draft_probs;
    accepted_rejection += AcceptDrafts(block, params).accepted;
    params.rule = AcceptRule::kSamplerEquality;
    block.draft_probs = nullptr;
    accepted_equality += AcceptDrafts(block, params).accepted;
  }
  const double n = kTrials;
  EXPECT_NEAR(accepted_rejection / n, min_sum, 4 * std::sqrt(min_sum * (1 - min_sum) / n));
  EXPECT_NEAR(accepted_equality / n, product_sum, 4 * std::sqrt(product_sum * (1 - product_sum) / n));
  EXPECT_GT(accepted_rejection, accepted_equality);
}

}  // namespace
}  // namespace mtpspec
