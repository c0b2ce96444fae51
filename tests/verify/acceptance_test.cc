// The acceptance rules on hand-made verify blocks. The expected draws are computed here with
// SampleToken (whose own contract is tested in sampler_test.cc), so each rule is checked against
// what it promises: sampler-equality accepts exactly while the drafts equal the sampler's draws,
// rejection sampling reduces to it for deterministic drafts at T = 0, relaxed accepts within top-N
// and δ, synthetic accepts at its configured rate, and every result is m drafts plus one token.
#include "verify/acceptance.h"

#include <cmath>
#include <tuple>
#include <set>
#include <vector>

#include "core/philox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/spec/chi_square.h"

namespace mtpspec {
namespace {

using spec_testing::ChiSquareTest;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 6;

// Five rows (k = 4) of distinct, non-degenerate logits.
const std::vector<float>& BlockLogits() {
  static const std::vector<float> logits = {
      0.3f, 1.2f, -0.4f, 0.9f, 0.0f, -1.0f,   // row 0: argmax 1
      1.5f, 0.2f, 0.1f, -0.3f, 1.1f, 0.4f,    // row 1: argmax 0
      -0.5f, 0.0f, 0.6f, 0.2f, -1.2f, 1.8f,   // row 2: argmax 5
      0.9f, 0.9f, 0.3f, 1.0f, -0.1f, 0.5f,    // row 3: argmax 3
      0.0f, -0.2f, 0.7f, 0.1f, 1.3f, 0.6f,    // row 4: argmax 4
  };
  return logits;
}

const float* Row(int64_t j) { return BlockLogits().data() + j * kVocab; }

AcceptParams Rule(AcceptRule rule, double temperature, uint64_t seed = 11) {
  AcceptParams p;
  p.rule = rule;
  p.sampling.temperature = temperature;
  p.sampling.seed = seed;
  return p;
}

AcceptResult Accept(const std::vector<int32_t>& drafts, const AcceptParams& params, int64_t first_position = 100,
                    const std::vector<std::vector<double>>* draft_probs = nullptr, const float* logits = nullptr,
                    int64_t vocab = kVocab) {
  VerifyBlock block;
  block.target_logits = logits ? logits : BlockLogits().data();
  block.vocab = vocab;
  block.drafts = drafts;
  block.draft_probs = draft_probs;
  block.first_position = first_position;
  return AcceptDrafts(block, params);
}

// The target sampler's own draw for row j of the block.
int32_t Draw(int64_t j, const AcceptParams& params, int64_t first_position = 100) {
  return SampleToken(Row(j), kVocab, params.sampling, first_position + j);
}

TEST(AcceptanceTest, RuleNamesRoundTrip) {
  for (AcceptRule rule : {AcceptRule::kSamplerEquality, AcceptRule::kRejection, AcceptRule::kRelaxed,
                          AcceptRule::kSynthetic}) {
    auto parsed = ParseAcceptRule(AcceptRuleName(rule));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, rule);
  }
  EXPECT_STREQ(AcceptRuleName(AcceptRule::kSamplerEquality), "sampler-equality");
  EXPECT_TRUE(IsLossless(AcceptRule::kSamplerEquality));
  EXPECT_TRUE(IsLossless(AcceptRule::kRejection));
  EXPECT_FALSE(IsLossless(AcceptRule::kRelaxed));
  EXPECT_FALSE(IsLossless(AcceptRule::kSynthetic));
  auto bad = ParseAcceptRule("greedy-ish");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("greedy-ish"));
}

// --- sampler-equality ---------------------------------------------------------------------------

TEST(AcceptanceTest, SamplerEqualityAcceptsExactlyWhileDraftsEqualTheSamplerDraws) {
  for (double temperature : {0.0, 0.7, 1.3}) {
    for (uint64_t seed : {1u, 11u, 12345u}) {
      const AcceptParams params = Rule(AcceptRule::kSamplerEquality, temperature, seed);
      std::vector<int32_t> s;
      for (int64_t j = 0; j <= 4; ++j) s.push_back(Draw(j, params));
      for (int64_t m = 0; m <= 4; ++m) {
        // Drafts: the first m draws, then a wrong token, then the draws again (which must not
        // matter: acceptance stops at the first mismatch).
        std::vector<int32_t> drafts(s.begin(), s.begin() + 4);
        if (m < 4) drafts[m] = (s[m] + 1) % kVocab;
        const AcceptResult r = Accept(drafts, params);
        EXPECT_EQ(r.accepted, m) << "T=" << temperature << " seed " << seed;
        EXPECT_THAT(r.tokens, ElementsAreArray(s.begin(), s.begin() + m + 1))
            << "T=" << temperature << " seed " << seed << " m " << m;
      }
    }
  }
}

// The device-sampling form: given the sampler's draws for every row, the same acceptance.
TEST(AcceptanceTest, AcceptBySamplesEqualsSamplerEqualityOnTheSameDraws) {
  for (double temperature : {0.0, 0.7, 1.3}) {
    for (uint64_t seed : {1u, 11u, 12345u}) {
      const AcceptParams params = Rule(AcceptRule::kSamplerEquality, temperature, seed);
      std::vector<int32_t> s;  // [5] the draws of rows 0..4
      for (int64_t j = 0; j <= 4; ++j) s.push_back(Draw(j, params));
      for (int64_t k = 0; k <= 4; ++k) {
        for (int64_t m = 0; m <= k; ++m) {
          std::vector<int32_t> drafts(s.begin(), s.begin() + k);
          if (m < k) drafts[m] = (s[m] + 1) % kVocab;
          auto by_samples = AcceptBySamples(drafts, std::span<const int32_t>(s.data(), k + 1));
          ASSERT_TRUE(by_samples.ok()) << by_samples.status();
          const AcceptResult host = Accept(drafts, params);
          EXPECT_EQ(by_samples->accepted, host.accepted) << "T=" << temperature << " k " << k << " m " << m;
          EXPECT_EQ(by_samples->tokens, host.tokens) << "T=" << temperature << " k " << k << " m " << m;
          EXPECT_EQ(by_samples->accepted, m);
        }
      }
    }
  }
  // One draw per row, k + 1 rows: anything else is an error naming the counts.
  const std::vector<int32_t> drafts = {1, 2};
  const std::vector<int32_t> two = {1, 2};
  auto bad = AcceptBySamples(drafts, two);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("2 samples for 2 drafts"));
}

TEST(AcceptanceTest, SamplerEqualityAtTemperatureZeroIsArgmaxMatching) {
  const AcceptParams greedy = Rule(AcceptRule::kSamplerEquality, 0.0);
  // Argmaxes of the rows: 1, 0, 5, 3, 4.
  AcceptResult r = Accept({1, 0, 5, 3}, greedy);
  EXPECT_EQ(r.accepted, 4);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 0, 5, 3, 4}));  // bonus = argmax of row 4
  r = Accept({1, 0, 2, 3}, greedy);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 0, 5}));  // correction = argmax of row 2
  r = Accept({4, 0, 5, 3}, greedy);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1}));
  // No drafts: one plain sample from row 0.
  r = Accept({}, greedy);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1}));
}

// --- rejection ----------------------------------------------------------------------------------

TEST(AcceptanceTest, RejectionWithDeterministicDraftsAtTemperatureZeroEqualsSamplerEquality) {
  for (uint64_t seed : {0u, 3u, 77u}) {
    const AcceptParams rejection = Rule(AcceptRule::kRejection, 0.0, seed);
    const AcceptParams equality = Rule(AcceptRule::kSamplerEquality, 0.0, seed);
    // Every draft block of length 0, 1, 2 and 3 over the vocabulary.
    for (int64_t k = 0; k <= 3; ++k) {
      int64_t combos = 1;
      for (int64_t i = 0; i < k; ++i) combos *= kVocab;
      for (int64_t c = 0; c < combos; ++c) {
        std::vector<int32_t> drafts;
        for (int64_t i = 0, x = c; i < k; ++i, x /= kVocab) drafts.push_back(static_cast<int32_t>(x % kVocab));
        const AcceptResult a = Accept(drafts, rejection, 40 + c);
        const AcceptResult b = Accept(drafts, equality, 40 + c);
        ASSERT_EQ(a.accepted, b.accepted) << "k " << k << " combo " << c;
        ASSERT_EQ(a.tokens, b.tokens) << "k " << k << " combo " << c;
      }
    }
  }
}

// p = (.5, .3, .2), q = (.15, .6, .25), draft 1: accept with probability p(1)/q(1) = 1/2, and on
// rejection resample from max(0, p − q) = (.35, 0, 0), i.e. always token 0.
TEST(AcceptanceTest, RejectionResamplesFromTheResidualAndAcceptsWithRatio) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f),   // row 0
                                     0.0f, 0.0f, 0.0f};                                 // row 1 (bonus)
  const std::vector<std::vector<double>> q = {{0.15, 0.6, 0.25}};
  int64_t accepted = 0;
  const int64_t trials = 20000;
  for (int64_t t = 0; t < trials; ++t) {
    const AcceptParams params = Rule(AcceptRule::kRejection, 1.0, 1000 + t);
    const AcceptResult r = Accept({1}, params, 9, &q, logits.data(), 3);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(r.accepted + 1));
    if (r.accepted == 1) {
      ++accepted;
      EXPECT_EQ(r.tokens[0], 1);
    } else {
      ASSERT_EQ(r.tokens[0], 0) << "the residual has all its mass on token 0";
    }
  }
  const double sigma = std::sqrt(trials * 0.5 * 0.5);
  EXPECT_NEAR(static_cast<double>(accepted), trials * 0.5, 4 * sigma);
}

TEST(AcceptanceTest, RejectionAcceptsEveryDraftWhenQEqualsP) {
  for (double temperature : {0.5, 1.0}) {
    const AcceptParams params = Rule(AcceptRule::kRejection, temperature);
    std::vector<std::vector<double>> q(4);
    for (int64_t j = 0; j < 4; ++j) SamplingDistribution(Row(j), kVocab, params.sampling, &q[j]);
    for (int32_t a = 0; a < kVocab; ++a) {
      for (int32_t b = 0; b < kVocab; ++b) {
        const std::vector<int32_t> drafts = {a, b, static_cast<int32_t>((a + b) % kVocab), 2};
        const AcceptResult r = Accept(drafts, params, 200 + a * kVocab + b, &q);
        EXPECT_EQ(r.accepted, 4) << "ratio p/q = 1 must always accept";
        EXPECT_EQ(r.tokens.back(), SampleToken(Row(4), kVocab, params.sampling, 200 + a * kVocab + b + 4))
            << "the bonus token is the target sampler's draw";
      }
    }
  }
}

TEST(AcceptanceTest, RejectionNeverAcceptsATokenTheTargetFiltersOut) {
  AcceptParams params = Rule(AcceptRule::kRejection, 1.0);
  params.sampling.top_k = 2;  // row 0 keeps tokens 1 and 3
  const std::vector<std::vector<double>> q = {std::vector<double>(kVocab, 1.0 / kVocab)};
  for (int64_t t = 0; t < 2000; ++t) {
    params.sampling.seed = t;
    for (int32_t d = 0; d < kVocab; ++d) {
      const AcceptResult r = Accept({d}, params, 5, &q);
      if (d != 1 && d != 3) {
        ASSERT_EQ(r.accepted, 0) << "draft " << d;
      }
      ASSERT_TRUE(r.tokens.back() == 1 || r.tokens.back() == 3 || r.accepted == 1) << "token " << r.tokens.back();
      if (r.accepted == 0) {
        ASSERT_TRUE(r.tokens[0] == 1 || r.tokens[0] == 3);
      }
    }
  }
}

// --- relaxed ------------------------------------------------------------------------------------

// One row with probabilities (.40, .35, .15, .10) at T = 1 and a bonus row.
std::vector<float> RelaxedLogits() {
  return {std::log(0.40f), std::log(0.35f), std::log(0.15f), std::log(0.10f), 0.0f, 1.0f, 0.0f, 0.0f};
}

TEST(AcceptanceTest, RelaxedAcceptsNonArgmaxDraftsWithinTopNAndDelta) {
  const std::vector<float> logits = RelaxedLogits();
  AcceptParams params = Rule(AcceptRule::kRelaxed, 0.0);
  params.relaxed_top_n = 3;
  params.relaxed_delta = 0.1;
  // Draft 1: rank 1 < 3 and .35 ≥ .40 − .1: accepted although greedy decoding would emit 0.
  AcceptResult r = Accept({1}, params, 0, nullptr, logits.data(), 4);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 1}));  // then the bonus: argmax of row 1
  // Draft 2: rank 2 but .15 < .30: rejected, corrected to the greedy token.
  r = Accept({2}, params, 0, nullptr, logits.data(), 4);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{0}));
  // A wider δ admits draft 2 (rank 2 < 3, .15 ≥ .40 − .3) ...
  params.relaxed_delta = 0.3;
  EXPECT_EQ(Accept({2}, params, 0, nullptr, logits.data(), 4).accepted, 1);
  // ... but never draft 3, which is outside the top 3 whatever δ is.
  params.relaxed_delta = 1.0;
  EXPECT_EQ(Accept({3}, params, 0, nullptr, logits.data(), 4).accepted, 0);
  // With top_n = 1 only the argmax passes, even with δ = 1.
  params.relaxed_top_n = 1;
  EXPECT_EQ(Accept({1}, params, 0, nullptr, logits.data(), 4).accepted, 0);
  EXPECT_EQ(Accept({0}, params, 0, nullptr, logits.data(), 4).accepted, 1);
}

TEST(AcceptanceTest, RelaxedUsesTheSamplingTemperature) {
  // At T = 1 draft 1 is .35 vs top .40 − δ; at T = 4 the distribution flattens: p ∝ p^(1/4).
  const std::vector<float> logits = RelaxedLogits();
  AcceptParams params = Rule(AcceptRule::kRelaxed, 1.0);
  params.relaxed_top_n = 3;
  params.relaxed_delta = 0.03;  // .35 < .40 − .03 = .37: rejected at T = 1
  EXPECT_EQ(Accept({1}, params, 0, nullptr, logits.data(), 4).accepted, 0);
  double z = 0;
  for (double p : {0.40, 0.35, 0.15, 0.10}) z += std::pow(p, 0.25);
  const double gap = (std::pow(0.40, 0.25) - std::pow(0.35, 0.25)) / z;
  ASSERT_LT(gap, 0.03);  // ≈ .0095: within δ at T = 4
  params.sampling.temperature = 4.0;
  EXPECT_EQ(Accept({1}, params, 0, nullptr, logits.data(), 4).accepted, 1);
}

// --- synthetic ----------------------------------------------------------------------------------

TEST(AcceptanceTest, SyntheticAcceptsAtTheConfiguredRate) {
  AcceptParams params = Rule(AcceptRule::kSynthetic, 0.0);
  params.synthetic_rates = {0.3};
  const int64_t trials = 20000;
  int64_t accepted = 0;
  for (int64_t t = 0; t < trials; ++t) {
    params.sampling.seed = t;
    // A draft the target would never choose: synthetic acceptance ignores the draft's content.
    const AcceptResult r = Accept({2}, params, 50);
    accepted += r.accepted;
    EXPECT_EQ(r.tokens.back(), r.accepted == 1 ? 0 : 1);  // bonus: argmax row 1; correction: argmax row 0
  }
  const double sigma = std::sqrt(trials * 0.3 * 0.7);  // ≈ 64.8
  EXPECT_NEAR(static_cast<double>(accepted), trials * 0.3, 3 * sigma);
}

// Per-position rates (.9, .5, .2): the accepted count m of a k = 3 block has the distribution
// P(0) = .1, P(1) = .9·.5, P(2) = .9·.5·.8, P(3) = .9·.5·.2.
TEST(AcceptanceTest, SyntheticPerPositionRatesGiveTheExpectedHistogram) {
  AcceptParams params = Rule(AcceptRule::kSynthetic, 0.0);
  params.synthetic_rates = {0.9, 0.5, 0.2};
  std::vector<int64_t> histogram(4, 0);
  for (int64_t t = 0; t < 20000; ++t) {
    params.sampling.seed = 777 + t;
    ++histogram[Accept({5, 5, 5}, params, 3).accepted];
  }
  const auto chi = ChiSquareTest(histogram, {0.1, 0.45, 0.36, 0.09});
  EXPECT_GT(chi.p_value, 0.01) << chi.detail;
  // Rates beyond the list repeat its last entry; an empty list accepts nothing.
  params.synthetic_rates = {1.0};
  EXPECT_EQ(Accept({5, 5, 5, 5}, params, 3).accepted, 4);
  params.synthetic_rates = {};
  EXPECT_EQ(Accept({1, 0, 5, 3}, params, 3).accepted, 0);
}

// Unconditional rates (llama.cpp's GLM-5.2 numbers, 0.834 / 0.653 / 0.494) become conditional ones
// whose running products give them back, and the synthetic rule then accepts the drafts of each
// position at the unconditional rate: the mean accepted length is 1 + 0.834 + 0.653 + 0.494 = 2.981.
TEST(AcceptanceTest, UnconditionalRatesGiveTheirMeanAcceptedLength) {
  const std::vector<double> unconditional = {0.834, 0.653, 0.494};
  auto conditional = SyntheticRatesFromUnconditional(unconditional, "rates");
  ASSERT_TRUE(conditional.ok()) << conditional.status();
  double product = 1.0;
  for (size_t i = 0; i < unconditional.size(); ++i) {
    product *= (*conditional)[i];
    EXPECT_NEAR(product, unconditional[i], 1e-12) << i;
  }
  AcceptParams params = Rule(AcceptRule::kSynthetic, 0.0);
  params.synthetic_rates = *conditional;
  const int64_t trials = 20000;
  std::vector<int64_t> reached(3, 0);
  double length = 0;
  for (int64_t t = 0; t < trials; ++t) {
    params.sampling.seed = 4242 + t;
    const int64_t m = Accept({5, 5, 5}, params, 3).accepted;
    length += 1.0 + static_cast<double>(m);
    for (int64_t i = 0; i < m; ++i) ++reached[i];
  }
  for (size_t i = 0; i < 3; ++i) {
    const double sigma = std::sqrt(unconditional[i] * (1 - unconditional[i]) / trials);
    EXPECT_NEAR(static_cast<double>(reached[i]) / trials, unconditional[i], 4 * sigma) << "position " << i;
  }
  EXPECT_NEAR(length / trials, 2.981, 0.03);
}

TEST(AcceptanceTest, RisingOrOutOfRangeUnconditionalRatesAreErrors) {
  auto rising = SyntheticRatesFromUnconditional(std::vector<double>{0.5, 0.7}, "--synthetic-rates-unconditional");
  ASSERT_FALSE(rising.ok());
  EXPECT_THAT(std::string(rising.status().message()), HasSubstr("--synthetic-rates-unconditional[1] = 0.7 rises"));
  EXPECT_FALSE(SyntheticRatesFromUnconditional(std::vector<double>{1.5}, "r").ok());
  EXPECT_FALSE(SyntheticRatesFromUnconditional(std::vector<double>{-0.1}, "r").ok());
  // After a zero every rate is zero, and its conditional form too.
  auto zero = SyntheticRatesFromUnconditional(std::vector<double>{0.5, 0.0, 0.0}, "r");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, (std::vector<double>{0.5, 0.0, 0.0}));
}

// vLLM's schedule for a mean accepted length: ones, one fraction, zeros; 1 + their sum is the length.
TEST(AcceptanceTest, AcceptanceLengthScheduleSumsToTheLength) {
  for (const auto& [length, k, expected] : std::vector<std::tuple<double, int64_t, std::vector<double>>>{
           {2.5, 3, {1.0, 0.5, 0.0}},
           {1.0, 2, {0.0, 0.0}},
           {4.0, 3, {1.0, 1.0, 1.0}},
           {1.84, 1, {0.84}},
           {3.61, 5, {1.0, 1.0, 0.61, 0.0, 0.0}}}) {
    auto rates = SyntheticRatesForAcceptanceLength(length, k, "al");
    ASSERT_TRUE(rates.ok()) << rates.status();
    ASSERT_EQ(rates->size(), expected.size());
    double sum = 1.0;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR((*rates)[i], expected[i], 1e-12) << length << " " << i;
      sum += (*rates)[i];
    }
    EXPECT_NEAR(sum, length, 1e-12);
  }
  auto too_long = SyntheticRatesForAcceptanceLength(4.5, 3, "--synthetic-acceptance-length");
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("outside [1, k + 1 = 4]"));
  EXPECT_FALSE(SyntheticRatesForAcceptanceLength(0.5, 3, "al").ok());
}

// --- structure shared by all rules --------------------------------------------------------------

TEST(AcceptanceTest, EveryResultIsTheAcceptedDraftsFollowedByExactlyOneToken) {
  std::vector<std::vector<double>> uniform_q(4, std::vector<double>(kVocab, 1.0 / kVocab));
  int64_t total_accepted = 0;
  for (AcceptRule rule : {AcceptRule::kSamplerEquality, AcceptRule::kRejection, AcceptRule::kRelaxed,
                          AcceptRule::kSynthetic}) {
    for (double temperature : {0.0, 0.8}) {
      for (int64_t k = 0; k <= 4; ++k) {
        for (uint64_t trial = 0; trial < 300; ++trial) {
          AcceptParams params = Rule(rule, temperature, trial);
          params.synthetic_rates = {0.6};
          std::vector<int32_t> drafts;
          for (int64_t i = 0; i < k; ++i) {
            // Pseudo-random drafts, biased towards the draws so that long accepts happen too.
            const double u = UniformAt(trial, i, 9);
            drafts.push_back(u < 0.5 ? Draw(i, params, 30) : static_cast<int32_t>(u * 2 * kVocab) % kVocab);
          }
          const bool sampled_q = rule == AcceptRule::kRejection && trial % 2 == 1;
          const AcceptResult r = Accept(drafts, params, 30, sampled_q ? &uniform_q : nullptr);
          ASSERT_GE(r.accepted, 0);
          ASSERT_LE(r.accepted, k);
          ASSERT_EQ(r.tokens.size(), static_cast<size_t>(r.accepted + 1));
          for (int64_t i = 0; i < r.accepted; ++i) ASSERT_EQ(r.tokens[i], drafts[i]);
          for (int32_t t : r.tokens) ASSERT_TRUE(t >= 0 && t < kVocab);
          // Same block, same answer: the rules keep no state.
          const AcceptResult again = Accept(drafts, params, 30, sampled_q ? &uniform_q : nullptr);
          ASSERT_EQ(again.tokens, r.tokens);
          // The bonus token (all accepted), and any correction outside rejection sampling, is the
          // target sampler's own draw for its row.
          if (r.accepted == k || rule != AcceptRule::kRejection) {
            ASSERT_EQ(r.tokens.back(), Draw(r.accepted, params, 30)) << AcceptRuleName(rule);
          }
          total_accepted += r.accepted;
        }
      }
    }
  }
  EXPECT_GT(total_accepted, 1000);  // the sweep did exercise acceptance
}

}  // namespace
}  // namespace mtpspec
