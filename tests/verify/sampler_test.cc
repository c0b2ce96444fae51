// The shared sampler: greedy argmax, the top-k / top-p / min-p filters on hand-made logits (the
// expected probabilities are computed here in float64), the inverse-CDF draw, the determinism of
// SampleToken, and argument validation.
#include "verify/sampler.h"

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "core/philox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/spec/chi_square.h"

namespace mtpspec {
namespace {

using spec_testing::ChiSquareTest;
using ::testing::HasSubstr;

// softmax(logits / T) in float64, written independently of sampler.cc.
std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max<double>(max_logit, l);
  std::vector<double> p;
  double total = 0;
  for (float l : logits) {
    p.push_back(std::exp((l - max_logit) / temperature));
    total += p.back();
  }
  for (double& x : p) x /= total;
  return p;
}

// The expected filtered distribution: `p` restricted to `keep`, renormalized.
std::vector<double> Restrict(const std::vector<double>& p, const std::set<int>& keep) {
  double kept = 0;
  for (int i : keep) kept += p[i];
  std::vector<double> out(p.size(), 0.0);
  for (int i : keep) out[i] = p[i] / kept;
  return out;
}

std::vector<double> Distribution(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<double> probs;
  SamplingDistribution(logits.data(), static_cast<int64_t>(logits.size()), params, &probs);
  return probs;
}

void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12) << what << " index " << i;
}

SamplingParams Params(double temperature, int64_t top_k = 0, double top_p = 1.0, double min_p = 0.0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// --- greedy ---------------------------------------------------------------------------------

TEST(SamplerTest, ArgmaxPicksTheLargestAndTheLowestIndexOnTies) {
  const std::vector<float> distinct = {0.1f, -3.0f, 2.5f, 2.4f};
  EXPECT_EQ(Argmax(distinct.data(), 4), 2);
  const std::vector<float> tied = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  EXPECT_EQ(Argmax(tied.data(), 5), 1);
  const std::vector<float> all_equal(7, -1.5f);
  EXPECT_EQ(Argmax(all_equal.data(), 7), 0);
  const std::vector<float> with_inf = {-INFINITY, -INFINITY, -100.0f, -INFINITY};
  EXPECT_EQ(Argmax(with_inf.data(), 4), 2);
  const std::vector<float> single = {42.0f};
  EXPECT_EQ(Argmax(single.data(), 1), 0);
}

TEST(SamplerTest, GreedyDistributionIsOneHotAtTheArgmax) {
  const std::vector<float> logits = {0.0f, 5.0f, -1.0f, 5.0f};
  EXPECT_EQ(Distribution(logits, Params(0.0)), (std::vector<double>{0, 1, 0, 0}));
  // Filters do not matter for greedy decoding.
  EXPECT_EQ(Distribution(logits, Params(0.0, 1, 0.1, 0.9)), (std::vector<double>{0, 1, 0, 0}));
  for (int64_t position : {0, 1, 17, 1000000}) {
    SamplingParams greedy = Params(0.0);
    greedy.seed = 99;
    EXPECT_EQ(SampleToken(logits.data(), 4, greedy, position), 1);
  }
}

// --- the unfiltered distribution ----------------------------------------------------------------

TEST(SamplerTest, UnfilteredDistributionIsTheTemperedSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};
  for (double t : {0.25, 0.6, 1.0, 2.0, 10.0}) {
    ExpectNear(Distribution(logits, Params(t)), Softmax(logits, t), "T=" + std::to_string(t));
  }
  // Large logits do not overflow: softmax is shift invariant.
  std::vector<float> shifted = logits;
  for (float& l : shifted) l += 1000.0f;
  ExpectNear(Distribution(shifted, Params(1.0)), Softmax(logits, 1.0), "shifted by 1000");
}

// --- top-k ------------------------------------------------------------------------------------

TEST(SamplerTest, TopKKeepsTheKMostLikelyTokensWithLowestIndexOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const std::vector<double> p = Softmax(logits, 1.0);
  ExpectNear(Distribution(logits, Params(1.0, 1)), Restrict(p, {1}), "top_k=1 (tie 1/3 → 1)");
  ExpectNear(Distribution(logits, Params(1.0, 2)), Restrict(p, {1, 3}), "top_k=2");
  ExpectNear(Distribution(logits, Params(1.0, 3)), Restrict(p, {1, 3, 4}), "top_k=3");
  ExpectNear(Distribution(logits, Params(1.0, 4)), Restrict(p, {0, 1, 3, 4}), "top_k=4");
  ExpectNear(Distribution(logits, Params(1.0, 5)), p, "top_k=V");
  ExpectNear(Distribution(logits, Params(1.0, 50)), p, "top_k>V");
  // Hand check of top_k=2: the two tied logits share the mass equally.
  EXPECT_DOUBLE_EQ(Distribution(logits, Params(1.0, 2))[1], 0.5);
}

// --- top-p ------------------------------------------------------------------------------------

// For each top_p, the expected set is the smallest most-likely-first prefix whose mass reaches
// top_p. The table is checked against the float64 cumulative masses before it is used.
TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingTheMass) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};
  const std::vector<int> order = {1, 3, 0, 2, 4};  // descending probability
  struct Case {
    double temperature, top_p;
    size_t keep;  // prefix length of `order`
  };
  // T = 1: p = .6364 .2341 .0861 .0317 .0117 (cumulative .6364 .8705 .9566 .9883 1)
  // T = 0.5: p = .8647 .1171 .0158 .0021 .0003 (cumulative .8647 .9818 .9976 .9997 1)
  const std::vector<Case> cases = {
      {1.0, 0.5, 1}, {1.0, 0.6, 1}, {1.0, 0.7, 2}, {1.0, 0.87, 2}, {1.0, 0.9, 3},
      {1.0, 0.98, 4}, {1.0, 0.99, 5}, {0.5, 0.8, 1}, {0.5, 0.9, 2}, {0.5, 0.99, 3},
  };
  for (const Case& c : cases) {
    const std::vector<double> p = Softmax(logits, c.temperature);
    std::vector<double> cumulative;
    double mass = 0;
    for (int i : order) cumulative.push_back(mass += p[i]);
    // The table itself must agree with the float64 masses.
    ASSERT_GE(cumulative[c.keep - 1], c.top_p) << "table row T=" << c.temperature << " top_p=" << c.top_p;
    if (c.keep >= 2) {
      ASSERT_LT(cumulative[c.keep - 2], c.top_p);
    }
    const std::set<int> keep(order.begin(), order.begin() + c.keep);
    ExpectNear(Distribution(logits, Params(c.temperature, 0, c.top_p)), Restrict(p, keep),
               "T=" + std::to_string(c.temperature) + " top_p=" + std::to_string(c.top_p));
  }
  // top_p = 1 keeps everything.
  ExpectNear(Distribution(logits, Params(1.0, 0, 1.0)), Softmax(logits, 1.0), "top_p=1");
}

// --- min-p ------------------------------------------------------------------------------------

TEST(SamplerTest, MinPKeepsTokensWithinAFractionOfTheTopProbability) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};
  const std::vector<double> p = Softmax(logits, 1.0);
  // p_max = p[1]; ratios p[i]/p_max are e^(l_i − 3): .1353, 1, .0498, .3679, .0183
  for (double min_p : {0.0, 0.01, 0.02, 0.04, 0.1, 0.2, 0.3, 0.5, 1.0}) {
    std::set<int> keep;
    for (int i = 0; i < 5; ++i) {
      if (std::exp(logits[i] - 3.0) >= min_p) keep.insert(i);
    }
    ExpectNear(Distribution(logits, Params(1.0, 0, 1.0, min_p)), Restrict(p, keep),
               "min_p=" + std::to_string(min_p));
  }
  // Spot checks of that rule by hand.
  EXPECT_EQ(Distribution(logits, Params(1.0, 0, 1.0, 0.3))[0], 0.0);
  EXPECT_GT(Distribution(logits, Params(1.0, 0, 1.0, 0.1))[0], 0.0);
  // min_p = 1 keeps every token tied with the maximum.
  const std::vector<float> tied = {2.0f, 2.0f, 0.0f};
  ExpectNear(Distribution(tied, Params(1.0, 0, 1.0, 1.0)), {0.5, 0.5, 0.0}, "min_p=1 with a tie");
}

TEST(SamplerTest, FiltersActOnTheTemperedDistribution) {
  // At T = 0.5 the ratio to the top is e^(2(l − 3)): token 3 has e^-2 = .135 < 0.2, so min_p = 0.2
  // drops it, while at T = 1 (ratio .368) it stays.
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};
  EXPECT_GT(Distribution(logits, Params(1.0, 0, 1.0, 0.2))[3], 0.0);
  EXPECT_EQ(Distribution(logits, Params(0.5, 0, 1.0, 0.2))[3], 0.0);
}

TEST(SamplerTest, FilteredDistributionsSumToOne) {
  const std::vector<float> logits = {0.3f, -0.2f, 1.7f, 1.7f, 0.0f, -2.0f, 0.9f, 1.1f};
  for (double t : {0.3, 1.0, 2.5}) {
    for (int64_t top_k : {0, 1, 3, 8}) {
      for (double top_p : {0.2, 0.75, 1.0}) {
        for (double min_p : {0.0, 0.3, 1.0}) {
          const std::vector<double> probs = Distribution(logits, Params(t, top_k, top_p, min_p));
          double total = 0;
          int kept = 0;
          for (double x : probs) {
            ASSERT_GE(x, 0.0);
            total += x;
            kept += x > 0;
          }
          EXPECT_NEAR(total, 1.0, 1e-12);
          EXPECT_GE(kept, 1);
          if (top_k > 0) {
            EXPECT_LE(kept, top_k);
          }
        }
      }
    }
  }
}

// --- the draw ---------------------------------------------------------------------------------

TEST(SamplerTest, DrawFromIsTheInverseCdfOverPositiveEntries) {
  const std::vector<double> probs = {0.0, 0.25, 0.0, 0.5, 0.25};
  EXPECT_EQ(DrawFrom(probs, 0.0), 1);
  EXPECT_EQ(DrawFrom(probs, 0.2499), 1);
  EXPECT_EQ(DrawFrom(probs, 0.25), 3);
  EXPECT_EQ(DrawFrom(probs, 0.7499), 3);
  EXPECT_EQ(DrawFrom(probs, 0.75), 4);
  EXPECT_EQ(DrawFrom(probs, 0.9999999), 4);
  // Mass that sums to slightly under 1: a u in the rounding gap gives the last positive entry, never
  // a zero-probability one.
  const std::vector<double> short_mass = {0.3, 0.3, 0.3999999, 0.0};
  EXPECT_EQ(DrawFrom(short_mass, 0.99999995), 2);
}

// Two draws without replacement from q: the pair (a, b) comes with probability q_a · q_b / (1 − q_a)
// (an independent oracle); never a repeat; a token without mass is never drawn, and a q whose mass
// runs out stops early.
TEST(SamplerTest, DrawWithoutReplacementFollowsTheSequentialDistribution) {
  const std::vector<double> q = {0.4, 0.0, 0.3, 0.2, 0.1};
  const int64_t V = static_cast<int64_t>(q.size());
  std::vector<double> expected(V * V, 0.0);  // [a, b]
  for (int64_t a = 0; a < V; ++a) {
    for (int64_t b = 0; b < V; ++b) {
      if (a != b && q[a] > 0 && q[b] > 0) expected[a * V + b] = q[a] * q[b] / (1.0 - q[a]);
    }
  }
  std::vector<int64_t> counts(V * V, 0);
  constexpr int64_t kTrials = 50000;
  for (int64_t t = 0; t < kTrials; ++t) {
    const std::vector<double> u = {UniformAt(3, static_cast<uint64_t>(t), 0), UniformAt(3, static_cast<uint64_t>(t), 1)};
    const std::vector<int32_t> drawn = DrawWithoutReplacement(q, u);
    ASSERT_EQ(drawn.size(), 2u);
    ASSERT_NE(drawn[0], drawn[1]);
    ++counts[drawn[0] * V + drawn[1]];
  }
  const auto chi = ChiSquareTest(counts, expected);
  EXPECT_GT(chi.p_value, 0.001) << chi.detail;

  const std::vector<double> two = {0.0, 0.75, 0.0, 0.25};
  const std::vector<int32_t> all = DrawWithoutReplacement(two, {0.5, 0.5, 0.5, 0.5});
  ASSERT_EQ(all.size(), 2u);  // only two tokens have mass
  EXPECT_THAT(std::set<int32_t>(all.begin(), all.end()), ::testing::ElementsAre(1, 3));
  std::vector<double> left = two;
  EXPECT_TRUE(RemoveAndRenormalize(&left, 1));
  EXPECT_THAT(left, ::testing::ElementsAre(0.0, 0.0, 0.0, 1.0));
  EXPECT_FALSE(RemoveAndRenormalize(&left, 3));
  EXPECT_THAT(left, ::testing::ElementsAre(0.0, 0.0, 0.0, 0.0));
}

TEST(SamplerTest, SampleTokenIsTheDocumentedPhiloxDraw) {
  const std::vector<float> logits = {0.2f, 1.0f, -0.5f, 0.7f, 0.0f, 1.3f};
  const SamplingParams params = [] {
    SamplingParams p = Params(0.8, 4, 0.95, 0.05);
    p.seed = 0x1234'5678'9abcULL;
    return p;
  }();
  const std::vector<double> probs = Distribution(logits, params);
  for (int64_t position = 0; position < 500; ++position) {
    const int32_t expected = DrawFrom(probs, UniformAt(params.seed, position, static_cast<uint32_t>(RngStream::kTarget)));
    ASSERT_EQ(SampleToken(logits.data(), 6, params, position), expected) << "position " << position;
  }
}

TEST(SamplerTest, SampleTokenIsAPureFunctionOfItsArguments) {
  const std::vector<float> logits = {0.2f, 1.0f, -0.5f, 0.7f, 0.0f, 1.3f};
  SamplingParams params = Params(1.0);
  params.seed = 7;
  std::vector<int32_t> first, again;
  for (int64_t position = 0; position < 200; ++position) first.push_back(SampleToken(logits.data(), 6, params, position));
  // Backwards, interleaved with calls for other positions and seeds: no hidden state.
  for (int64_t position = 199; position >= 0; --position) {
    SamplingParams other = params;
    other.seed = 8;
    (void)SampleToken(logits.data(), 6, other, position + 1);
    again.insert(again.begin(), SampleToken(logits.data(), 6, params, position));
  }
  EXPECT_EQ(first, again);
  // A different seed gives a different sequence of draws.
  params.seed = 8;
  std::vector<int32_t> other_seed;
  for (int64_t position = 0; position < 200; ++position) other_seed.push_back(SampleToken(logits.data(), 6, params, position));
  EXPECT_NE(first, other_seed);
}

// Draws at successive positions follow the distribution and are independent: the pairs (draw at
// 2i, draw at 2i + 1) fit the product distribution.
TEST(SamplerTest, DrawsAtDifferentPositionsAreIndependentSamples) {
  const std::vector<float> logits = {0.5f, 1.5f, 0.0f, 1.0f, -0.5f};
  SamplingParams params = Params(1.0);
  params.seed = 2024;
  const std::vector<double> p = Softmax(logits, 1.0);
  const int64_t pairs = 40000;
  std::vector<int64_t> single(5, 0), joint(25, 0);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t a = SampleToken(logits.data(), 5, params, 2 * i);
    const int32_t b = SampleToken(logits.data(), 5, params, 2 * i + 1);
    ++single[a];
    ++single[b];
    ++joint[a * 5 + b];
  }
  std::vector<double> product(25);
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 5; ++b) product[a * 5 + b] = p[a] * p[b];
  }
  const auto marginal = ChiSquareTest(single, p);
  EXPECT_GT(marginal.p_value, 0.01) << "chi2 " << marginal.statistic << "\n" << marginal.detail;
  const auto pairwise = ChiSquareTest(joint, product);
  EXPECT_GT(pairwise.p_value, 0.01) << "chi2 " << pairwise.statistic << "\n" << pairwise.detail;
}

TEST(SamplerTest, SampledTokensNeverComeFromFilteredOutEntries) {
  const std::vector<float> logits = {0.5f, 1.5f, 0.0f, 1.0f, -0.5f, 1.4f};
  SamplingParams params = Params(1.5, 3, 1.0, 0.0);  // keeps 1, 5, 3
  params.seed = 5;
  std::set<int32_t> seen;
  for (int64_t position = 0; position < 3000; ++position) seen.insert(SampleToken(logits.data(), 6, params, position));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 5}));
}

// --- validation -------------------------------------------------------------------------------

TEST(SamplerTest, ValidParamsPass) {
  EXPECT_TRUE(ValidateSamplingParams(Params(0.0)).ok());
  EXPECT_TRUE(ValidateSamplingParams(Params(1.0, 5, 1.0, 0.0)).ok());
  EXPECT_TRUE(ValidateSamplingParams(Params(0.7, 0, 1e-9, 1.0)).ok());
}

TEST(SamplerTest, ValidationErrorsNameTheArgument) {
  struct Case {
    SamplingParams params;
    std::string name;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {Params(-0.1), "temperature"},        {Params(nan), "temperature"},
      {Params(inf), "temperature"},         {Params(1.0, -1), "top_k"},
      {Params(1.0, 0, 0.0), "top_p"},       {Params(1.0, 0, -0.5), "top_p"},
      {Params(1.0, 0, 1.0001), "top_p"},    {Params(1.0, 0, nan), "top_p"},
      {Params(1.0, 0, 1.0, -0.01), "min_p"}, {Params(1.0, 0, 1.0, 1.01), "min_p"},
      {Params(1.0, 0, 1.0, nan), "min_p"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ValidateSamplingParams(c.params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.name));
  }
}

}  // namespace
}  // namespace mtpspec

namespace mtpspec {
namespace {

// top-p acts on the renormalised top-k set: p = (.4, .3, .3), top_k = 2, top_p = 0.5 keeps {0}
// (0.4 / 0.7 ≥ 0.5), as transformers does.
TEST(SamplerTopKThenTopPTest, TopPMeasuresMassWithinTheTopKSet) {
  const float logits[3] = {std::log(0.4f), std::log(0.3f), std::log(0.3f)};
  SamplingParams params;
  params.temperature = 1.0;
  params.top_k = 2;
  params.top_p = 0.5;
  std::vector<double> probs;
  SamplingDistribution(logits, 3, params, &probs);
  EXPECT_DOUBLE_EQ(probs[0], 1.0);
  EXPECT_DOUBLE_EQ(probs[1], 0.0);
  EXPECT_DOUBLE_EQ(probs[2], 0.0);
}

}  // namespace
}  // namespace mtpspec
