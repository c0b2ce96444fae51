// bench/logit_compare: KL, logit error, argmax agreement and loss against values worked out by hand.
#include "bench/logit_compare.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec::bench {
namespace {

TEST(LogitCompareTest, EqualRowsDifferInNothing) {
  const std::vector<float> z = {0.5f, -1.0f, 2.0f, 0.0f};
  const RowComparison r = CompareLogitRows(z.data(), z.data(), 4, 1);
  EXPECT_NEAR(r.kl, 0.0, 1e-15);
  EXPECT_EQ(r.max_abs_error, 0.0);
  EXPECT_TRUE(r.same_argmax);
  EXPECT_DOUBLE_EQ(r.nll_ref, r.nll_test);
  EXPECT_DOUBLE_EQ(r.logit_range, 3.0);
}

TEST(LogitCompareTest, AConstantShiftMovesTheLogitsButNotTheDistribution) {
  const std::vector<float> ref = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<float> test = ref;
  for (float& v : test) v += 5.0f;
  const RowComparison r = CompareLogitRows(ref.data(), test.data(), 4, 3);
  EXPECT_NEAR(r.kl, 0.0, 1e-12);
  EXPECT_NEAR(r.max_abs_error, 5.0, 1e-6);
  EXPECT_NEAR(r.nll_ref, r.nll_test, 1e-6);
}

TEST(LogitCompareTest, TwoTokenKlAndLossMatchTheClosedForm) {
  // p = (1/2, 1/2), q = (3/4, 1/4): KL(p‖q) = ½ ln(4/3); −log p(1) = ln 2, −log q(1) = ln 4.
  const std::vector<float> ref = {0.0f, 0.0f};
  const std::vector<float> test = {static_cast<float>(std::log(3.0)), 0.0f};
  const RowComparison r = CompareLogitRows(ref.data(), test.data(), 2, 1);
  EXPECT_NEAR(r.kl, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(r.nll_ref, std::log(2.0), 1e-12);
  EXPECT_NEAR(r.nll_test, std::log(4.0), 1e-7);
  EXPECT_TRUE(r.same_argmax);  // a tie in ref goes to token 0, test's maximum is token 0
}

TEST(LogitCompareTest, AFlippedMaximumIsAGreedyChange) {
  const std::vector<float> ref = {1.0f, 0.0f}, test = {0.0f, 1.0f};
  EXPECT_FALSE(CompareLogitRows(ref.data(), test.data(), 2, 0).same_argmax);
}

TEST(LogitCompareTest, SummaryPoolsRows) {
  std::vector<RowComparison> rows(100);
  for (int i = 0; i < 100; ++i) {
    rows[i].kl = i;  // 0 … 99
    rows[i].max_abs_error = 0.01 * i;
    rows[i].logit_range = 10.0;
    rows[i].same_argmax = i % 4 != 0;
    rows[i].nll_ref = 1.0;
    rows[i].nll_test = 1.5;
  }
  const ComparisonSummary s = Summarize(rows);
  EXPECT_EQ(s.rows, 100);
  EXPECT_DOUBLE_EQ(s.mean_kl, 49.5);
  EXPECT_DOUBLE_EQ(s.p99_kl, 98.0);  // the 99th of 100 sorted values
  EXPECT_DOUBLE_EQ(s.max_kl, 99.0);
  EXPECT_DOUBLE_EQ(s.max_abs_error, 0.99);
  EXPECT_DOUBLE_EQ(s.max_relative_error, 0.099);
  EXPECT_DOUBLE_EQ(s.argmax_agreement, 0.75);
  EXPECT_DOUBLE_EQ(s.mean_nll_test - s.mean_nll_ref, 0.5);
  EXPECT_EQ(Summarize({}).rows, 0);
}

TEST(LogitCompareTest, SequencesReportTheirFirstDifferenceAndEqualShare) {
  const SequenceAgreement s = CompareSequences({1, 2, 3, 4}, {1, 2, 5, 4});
  EXPECT_EQ(s.length, 4);
  EXPECT_EQ(s.first_difference, 2);
  EXPECT_DOUBLE_EQ(s.equal_fraction, 0.75);
  const SequenceAgreement same = CompareSequences({7, 8, 9}, {7, 8});
  EXPECT_EQ(same.length, 2);
  EXPECT_EQ(same.first_difference, 2);  // no difference within the common length
  EXPECT_DOUBLE_EQ(same.equal_fraction, 1.0);
}

}  // namespace
}  // namespace mtpspec::bench
