// AdaptiveK, fed directly with chosen verify costs, draft costs and acceptances. The expected
// choice is computed here from the definitions in adaptive_k.h: conditional acceptance of position
// i = (hits + 1) / (trials + 2) (Beta(1, 1) prior), E[tokens](k) = 1 + Σ_{i<k} Π_{j≤i} a_j,
// cost(k) = Tv(k + 1) + k · c, choice = argmax E/cost (smallest k on ties).
#include "spec/adaptive_k.h"

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

// The test's own model of what the controller has seen.
struct Feed {
  int64_t drafted, accepted;
  double seconds;
};

struct Oracle {
  explicit Oracle(int64_t k_max) : hits(k_max, 0), trials(k_max, 0) {}
  // Position i was tried if the draft had a position i and every earlier position was accepted; it
  // was a hit if it was accepted too.
  void Add(const Feed& f) {
    for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i) {
      if (i < f.drafted && f.accepted >= i) ++trials[i];
      if (i < f.drafted && f.accepted > i) ++hits[i];
    }
  }
  double Acceptance(int64_t i) const { return (hits[i] + 1.0) / (trials[i] + 2.0); }
  double Tokens(int64_t k) const {
    double total = 1, reach = 1;
    for (int64_t i = 0; i < k; ++i) total += reach *= Acceptance(i);
    return total;
  }
  std::vector<double> hits, trials;
};

void FeedAll(AdaptiveK& controller, Oracle& oracle, const std::vector<Feed>& feeds) {
  for (const Feed& f : feeds) {
    controller.RecordVerify(f.drafted, f.accepted, f.seconds);
    oracle.Add(f);
  }
}

TEST(AdaptiveKTest, StartsWithAPlainStepAndNeverProbesBeforeMeasuringOne) {
  AdaptiveK controller(4, /*probe_interval=*/3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(controller.Choose(), 0) << "call " << i;
}

TEST(AdaptiveKTest, PriorsGiveHalfAcceptance) {
  AdaptiveK controller(3);
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(0), 0.5);
  EXPECT_DOUBLE_EQ(controller.ExpectedTokens(0), 1.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedTokens(3), 1.0 + 0.5 + 0.25 + 0.125);
  // One verify of 3 drafts with 1 accepted: position 0 hit, position 1 tried and missed, position
  // 2 never reached.
  controller.RecordVerify(3, 1, 1.0);
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(0), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(1), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(2), 0.5);
  EXPECT_DOUBLE_EQ(controller.ExpectedTokens(3), 1.0 + 2.0 / 3 + 2.0 / 9 + 1.0 / 9);
}

TEST(AdaptiveKTest, CostsAreMovingAveragesAndUnmeasuredLengthsAreInterpolated) {
  AdaptiveK controller(6);
  controller.RecordVerify(0, 0, 1.0);   // rows 1
  controller.RecordVerify(3, 3, 1.3);   // rows 4
  // Rows 2 and 3 lie on the line through rows 1 and 4; rows 5.. continue it (slope 0.1 per row).
  EXPECT_NEAR(controller.ExpectedCost(0), 1.0, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(1), 1.1, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(2), 1.2, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(3), 1.3, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(4), 1.4, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(6), 1.6, 1e-12);
  // Draft steps add k · c; a second measurement moves the average by 0.2 of the difference.
  controller.RecordDraftStep(0.1);
  EXPECT_NEAR(controller.ExpectedCost(3), 1.3 + 3 * 0.1, 1e-12);
  controller.RecordDraftStep(0.2);
  EXPECT_NEAR(controller.ExpectedCost(3), 1.3 + 3 * 0.12, 1e-12);
  controller.RecordVerify(0, 0, 2.0);
  EXPECT_NEAR(controller.ExpectedCost(0), 1.2, 1e-12);  // 0.8 · 1.0 + 0.2 · 2.0

  // Only the plain step measured: longer verifies are guessed 10 % dearer per extra row.
  AdaptiveK plain_only(4);
  plain_only.RecordVerify(0, 0, 2.0);
  EXPECT_NEAR(plain_only.ExpectedCost(1), 2.2, 1e-12);
  EXPECT_NEAR(plain_only.ExpectedCost(4), 2.8, 1e-12);
}

TEST(AdaptiveKTest, ChoosesPlainDecodingWhenAcceptanceIsNearZero) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(1, 0, 1.05);
  controller.RecordDraftStep(0.05);
  EXPECT_LT(controller.ExpectedTokens(1) / controller.ExpectedCost(1), 1.0);
  EXPECT_EQ(controller.Choose(), 0);
}

TEST(AdaptiveKTest, ChoosesPlainDecodingWhenDraftingIsExpensive) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(4, 4, 1.0);
  controller.RecordDraftStep(2.0);  // every draft step costs two verifies
  EXPECT_EQ(controller.Choose(), 0);
}

TEST(AdaptiveKTest, ChoosesTheLargestKWhenAcceptanceIsNearOneAndVerifyIsCheap) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(4, 4, 1.0);  // verifying 5 rows costs as 1
  controller.RecordDraftStep(0.01);
  EXPECT_EQ(controller.Choose(), 4);
}

// A mixed history, then a sweep of draft costs: the choice is the argmax of E/cost computed here,
// and it never grows as drafting gets dearer (E(k)/k falls with k, so a dearer draft step only
// penalises long drafts more).
TEST(AdaptiveKTest, ChoiceIsTheArgmaxOfExpectedTokensPerSecond) {
  constexpr int64_t kMax = 6;
  const std::map<int64_t, double> verify_cost = {{1, 1.00}, {2, 1.03}, {3, 1.07}, {4, 1.12},
                                                 {5, 1.20}, {6, 1.32}, {7, 1.50}};
  std::vector<Feed> feeds;
  for (auto [accepted, count] : std::vector<std::pair<int64_t, int>>{{6, 8}, {5, 4}, {4, 6}, {3, 6}, {2, 6}, {1, 5}, {0, 5}}) {
    for (int i = 0; i < count; ++i) feeds.push_back({kMax, accepted, verify_cost.at(kMax + 1)});
  }
  for (int64_t rows = 1; rows <= kMax; ++rows) feeds.push_back({rows - 1, rows - 1, verify_cost.at(rows)});

  int64_t previous = kMax;
  int64_t interior_choices = 0;
  for (int step = 0; step <= 60; ++step) {
    const double draft_cost = 0.05 * step;
    AdaptiveK controller(kMax);
    Oracle oracle(kMax);
    FeedAll(controller, oracle, feeds);
    if (draft_cost > 0) controller.RecordDraftStep(draft_cost);

    int64_t best = 0;
    double best_rate = 0, runner_up = -1;
    for (int64_t k = 0; k <= kMax; ++k) {
      const double cost = verify_cost.at(k + 1) + k * draft_cost;
      EXPECT_NEAR(controller.ExpectedTokens(k), oracle.Tokens(k), 1e-12);
      EXPECT_NEAR(controller.ExpectedCost(k), cost, 1e-12);
      const double rate = oracle.Tokens(k) / cost;
      if (rate > best_rate) {
        runner_up = best_rate;
        best_rate = rate;
        best = k;
      } else {
        runner_up = std::max(runner_up, rate);
      }
    }
    ASSERT_GT(best_rate - runner_up, 1e-9) << "near tie at draft cost " << draft_cost;
    const int64_t chosen = controller.Choose();
    EXPECT_EQ(chosen, best) << "draft cost " << draft_cost;
    EXPECT_LE(chosen, previous) << "draft cost " << draft_cost;
    previous = chosen;
    interior_choices += chosen > 0 && chosen < kMax;
  }
  EXPECT_EQ(previous, 0);            // at 3 s per draft step, plain decoding wins
  EXPECT_GT(interior_choices, 10);   // and the sweep passed through intermediate k
}

TEST(AdaptiveKTest, ProbesKOneEveryProbeIntervalPlainChoices) {
  AdaptiveK controller(4, /*probe_interval=*/4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(1, 0, 1.05);
  controller.RecordDraftStep(0.05);
  std::vector<int64_t> choices;
  for (int i = 0; i < 12; ++i) choices.push_back(controller.Choose());
  EXPECT_EQ(choices, (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}));

  // Default interval 16: fifteen plain steps, then a probe.
  AdaptiveK standard(4);
  standard.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) standard.RecordVerify(1, 0, 1.05);
  standard.RecordDraftStep(0.05);
  for (int i = 1; i <= 32; ++i) EXPECT_EQ(standard.Choose(), i % 16 == 0 ? 1 : 0) << "call " << i;

  // A probe's outcome enters the acceptance estimate: 60 trials at position 0 so far, no hits.
  EXPECT_DOUBLE_EQ(standard.conditional_acceptance(0), 1.0 / 62.0);
  standard.RecordVerify(1, 1, 1.05);
  EXPECT_DOUBLE_EQ(standard.conditional_acceptance(0), 2.0 / 63.0);
}

TEST(AdaptiveKTest, RecoversFromPlainDecodingWhenAcceptanceImproves) {
  AdaptiveK controller(3, /*probe_interval=*/2);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 40; ++i) controller.RecordVerify(1, 0, 1.02);  // a_0 = 1/42: E(1)/cost(1) < 1
  controller.RecordDraftStep(0.02);
  EXPECT_EQ(controller.Choose(), 0);
  // The probes keep coming back accepted; the controller switches back to drafting.
  int64_t chosen = 0;
  for (int i = 0; i < 200 && chosen == 0; ++i) {
    chosen = controller.Choose();
    if (chosen > 0) {
      controller.RecordVerify(chosen, chosen, 1.02);
      chosen = controller.Choose();
    }
  }
  EXPECT_GT(chosen, 0);
}

}  // namespace
}  // namespace mtpspec
