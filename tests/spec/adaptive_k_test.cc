// AdaptiveK, fed directly with chosen verify costs, draft costs and acceptances. The expected
// choice is computed here from the definitions in adaptive_k.h: conditional acceptance of position
// i = (hits + 1) / (trials + 2) (Beta(1, 1) prior), E[tokens](k) = 1 + Σ_{i<k} Π_{j≤i} a_j,
// cost(0) = Tv(1), cost(k) = Tv(k + 1) + k · c + x, best = argmax E/cost (smallest k on ties).
// adaptive_k_simulation_test.cc runs it against a simulated target and drafter.
#include "spec/adaptive_k.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/spec/adaptive_k_test_util.h"

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


TEST(AdaptiveKTest, StartsWithPlainStepsAndProbesOnceTheBudgetAllows) {
  AdaptiveK controller(4, /*probe_interval=*/3);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(controller.Choose(), 0) << "call " << i;
    EXPECT_FALSE(controller.last_was_probe());
  }
  for (int64_t i = 0; i < kWarmUpPlainSteps; ++i) {
    EXPECT_EQ(controller.Choose(), 0);
    EXPECT_FALSE(controller.last_was_probe());
    controller.RecordVerify(0, 0, 1.0);
  }
  // The first probe of k = 1 (drafting has to prove itself) is priced from the priors: a verify of
  // 2 rows at 2 plain steps, plus a draft step, the cycle's extend and the catch-up over the deferred
  // rows at kPriorDraftStep plain steps each, acceptance 1/2, so it loses 2 + 1.5 − 1.5 · 1 = 2 s
  // against plain decoding. Without a request length it comes once that fits in 1% of the decoded
  // time: after 200 s of plain steps.
  EXPECT_NEAR(controller.ExpectedCost(1) + 3 * kPriorDraftStep * 1.0 - controller.ExpectedTokens(1) * controller.ExpectedCost(0),
              2.0, 1e-12);
  int64_t plain_steps = kWarmUpPlainSteps;
  while (controller.Choose() == 0) {
    EXPECT_FALSE(controller.last_was_probe());
    controller.RecordVerify(0, 0, 1.0);
    ++plain_steps;
    ASSERT_LT(plain_steps, 400);
  }
  EXPECT_EQ(plain_steps, 200);
  EXPECT_TRUE(controller.last_was_probe());
  EXPECT_EQ(controller.probes(), 1);
  EXPECT_EQ(controller.Best(), 0);
}

TEST(AdaptiveKTest, TheRequestLengthSetsTheBudgetOfTheFirstProbe) {
  // A request that may still make 256 tokens has a budget of 1% of ~259 plain steps: the first probe
  // (a loss of 2 s from the priors) comes right after the warm-up, when the drafter has the fewest
  // deferred rows to catch up on.
  AdaptiveK long_request(4);
  WarmUp(long_request, 1.0);
  long_request.SetTokensLeft(256);
  EXPECT_EQ(long_request.Choose(), 1);
  EXPECT_TRUE(long_request.last_was_probe());
  // 1% of (3 s decoded + 197 tokens at 1 s) is exactly the 2 s the probe is priced at; one token
  // fewer and it never comes while the request runs.
  AdaptiveK just_enough(4);
  WarmUp(just_enough, 1.0);
  just_enough.SetTokensLeft(197);
  EXPECT_EQ(just_enough.Choose(), 1);
  AdaptiveK short_request(4);
  WarmUp(short_request, 1.0);
  for (int64_t left = 196; left > 0; --left) {
    short_request.SetTokensLeft(left);
    EXPECT_EQ(short_request.Choose(), 0) << left << " tokens left";
    EXPECT_FALSE(short_request.last_was_probe());
    short_request.RecordVerify(0, 0, 1.0);
  }
  EXPECT_EQ(short_request.probes(), 0);
}

// Plain 1 s steps while the request has `from` down to `to` + 1 tokens left: each must be plain.
void ExpectPlainSteps(AdaptiveK& controller, int64_t from, int64_t to) {
  for (int64_t left = from; left > to; --left) {
    controller.SetTokensLeft(left);
    EXPECT_EQ(controller.Choose(), 0) << left << " tokens left";
    controller.RecordVerify(0, 0, 1.0);
  }
}

TEST(AdaptiveKTest, AFreshControllerDefersThePromptOfARequestTooShortForItsFirstProbe) {
  // 128 tokens (the trained model's benchmark requests): 1% of (3 + 124) plain steps cannot pay for
  // the first probe's 2, so the request decodes plainly and the drafter may skip the prompt.
  AdaptiveK short_request(4);
  EXPECT_TRUE(short_request.DeferPrompt(/*prompt_rows=*/512, /*tokens_left=*/127));
  WarmUp(short_request, 1.0);
  // Not even when the request turns out to have more room (the prompt's catch-up was never priced).
  ExpectPlainSteps(short_request, 1000, 900);
  EXPECT_EQ(short_request.probes(), 0);
  // A request that can pay for the first probe at its warm-up's end keeps the prompt, and probes.
  AdaptiveK long_request(4);
  EXPECT_FALSE(long_request.DeferPrompt(512, 200));
  WarmUp(long_request, 1.0);
  long_request.SetTokensLeft(197);
  EXPECT_EQ(long_request.Choose(), 1);
  EXPECT_TRUE(long_request.last_was_probe());
  // Without the request's length nothing is deferred.
  AdaptiveK unknown(4);
  EXPECT_FALSE(unknown.DeferPrompt(512, -1));
}

TEST(AdaptiveKTest, ACarriedControllerBanksTheBudgetAShortRequestLeftUnspent) {
  // Requests of 128 tokens, each too short for the first probe (priced at 2 plain steps) on its
  // own 1% budget.
  AdaptiveK controller(4);
  EXPECT_TRUE(controller.DeferPrompt(/*prompt_rows=*/512, /*tokens_left=*/127));
  WarmUp(controller, 1.0);
  ExpectPlainSteps(controller, 124, 0);
  EXPECT_EQ(controller.probes(), 0);
  // The second request has its own 1.27 s plus the 1.27 s the first left unspent: the probe fits
  // at its warm-up's end, so the drafter keeps the prompt.
  controller.BeginRequest();
  EXPECT_FALSE(controller.DeferPrompt(512, 127));
  WarmUp(controller, 1.0);
  controller.SetTokensLeft(124);
  EXPECT_EQ(controller.Choose(), 1);
  EXPECT_TRUE(controller.last_was_probe());
}

TEST(AdaptiveKTest, StopsProbingOnceOptimisticAcceptanceCannotPay) {
  // A 2-row verify costs 1.8 plain steps and a draft step 0.3: k = 1 would need acceptance ≥ 1.2 to
  // beat plain decoding by 5%, so after the first probe measures those costs no probe follows, even
  // though that probe's draft was accepted and the budget is unlimited (until max_probe_interval
  // cycles have passed: then one burst re-checks, as acceptance may change with the text).
  AdaptiveK controller(3, /*probe_interval=*/2, /*max_probe_interval=*/64, /*exploration_budget=*/1.0);
  WarmUp(controller, 1.0);
  ASSERT_EQ(controller.Choose(), 1);
  controller.RecordDraftStep(0.3);
  controller.RecordVerify(1, 1, 1.8);
  EXPECT_NEAR(controller.ExpectedTokensHigh(1), 1 + 2.0 / 3 + std::sqrt(2.0 / 9 / 4), 1e-12);  // 1.90 tokens for 2.1 s
  // (The first plain cycle is where the burst's follow-up would have been; 64 more are the gap.)
  for (int cycle = 0; cycle < 1 + 63; ++cycle) {
    EXPECT_EQ(controller.Choose(), 0) << "cycle " << cycle;
    controller.RecordVerify(0, 0, 1.0);
  }
  EXPECT_EQ(controller.probes(), 1);
  EXPECT_EQ(controller.Choose(), 1);  // the 64th cycle of the gap
  EXPECT_TRUE(controller.last_was_probe());
  // The same costs with a 2-row verify at 1.1 plain steps: k = 1 could pay, probes go on.
  AdaptiveK cheap(3, /*probe_interval=*/2, /*max_probe_interval=*/64, /*exploration_budget=*/1.0);
  WarmUp(cheap, 1.0);
  ASSERT_EQ(cheap.Choose(), 1);
  cheap.RecordDraftStep(0.3);
  cheap.RecordVerify(1, 0, 1.1);  // rejected: acceptance 1/3 + sd 0.24 → 1.57 tokens for 1.4 s
  int64_t probes = 0;
  for (int cycle = 0; cycle < 20; ++cycle) {
    const int64_t k = cheap.Choose();
    probes += cheap.last_was_probe();
    cheap.RecordVerify(k, 0, k == 0 ? 1.0 : 1.1);
  }
  EXPECT_GE(probes, 1);
}

TEST(AdaptiveKTest, OptimisticAcceptanceIsOneDeviationHighAndFallsWithPosition) {
  AdaptiveK controller(3);
  // Position 0: 1 hit in 4 trials → mean 2/6; position 1: 1 hit in 1 trial → mean 2/3 (above the first).
  for (const int64_t accepted : {0, 0, 0, 2}) controller.RecordVerify(2, accepted, 1.0);
  const double a0 = 2.0 / 6, h0 = a0 + std::sqrt(a0 * (1 - a0) / 7);
  EXPECT_NEAR(controller.ExpectedTokensHigh(1), 1 + h0, 1e-12);
  EXPECT_NEAR(controller.ExpectedTokensHigh(2), 1 + h0 + h0 * h0, 1e-12);  // position 1 capped at h0
  EXPECT_GT(controller.ExpectedTokensHigh(1), controller.ExpectedTokens(1));
}

TEST(AdaptiveKTest, ColdFirstPlainStepsArePricedAtTheirFastest) {
  // A decode's first steps run cold (measured on the trained model: 0.68 ms, then 0.20 ms). The
  // warm-up keeps the fastest of them; after it the moving average takes over.
  AdaptiveK controller(2);
  controller.RecordVerify(0, 0, 3.4);
  controller.RecordVerify(0, 0, 1.0);
  controller.RecordVerify(0, 0, 1.1);
  EXPECT_DOUBLE_EQ(controller.VerifyCost(1), 1.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 1.0);
  controller.RecordVerify(0, 0, 2.0);
  EXPECT_DOUBLE_EQ(controller.VerifyCost(1), 0.8 * 1.0 + 0.2 * 2.0);
  // Whole cycles: the median of three warm-up steps drops one cold step.
  for (const double s : {3.4, 1.0, 1.1}) controller.RecordCycle(0, s);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 1.1);
}

TEST(AdaptiveKTest, GrowsTheDraftLengthOneStepAtATime) {
  // Verify rows cost almost nothing and every draft is accepted, so the parts favour k_max; but k
  // drafts are considered only once a verify of k rows has been measured.
  AdaptiveK controller(5);
  WarmUp(controller, 1.0);
  controller.RecordDraftStep(0.01);
  controller.RecordVerify(1, 1, 1.01);  // rows 2 measured: k ≤ 2
  EXPECT_EQ(controller.Best(), 2);
  controller.RecordVerify(2, 2, 1.02);  // rows 3: k ≤ 3
  EXPECT_EQ(controller.Best(), 3);
  controller.RecordVerify(4, 4, 1.04);  // rows 5 (rows 4 interpolated): k ≤ 5
  EXPECT_EQ(controller.Best(), 5);
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

TEST(AdaptiveKTest, LeavingPlainIsJudgedWithAcceptanceOneStandardDeviationLow) {
  AdaptiveK controller(2);
  // Position 0: 3 hits in 4 trials → posterior mean 4/6, sd = sqrt(a (1 − a) / (4 + 3)).
  // Position 1: 1 hit in 2 trials (the third verify never reached it) → 2/4, sd with 2 + 3.
  controller.RecordVerify(2, 2, 1.0);
  controller.RecordVerify(2, 1, 1.0);
  controller.RecordVerify(2, 0, 1.0);
  controller.RecordVerify(1, 1, 1.0);
  const double a0 = 4.0 / 6, a1 = 2.0 / 4;
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(0), a0);
  EXPECT_DOUBLE_EQ(controller.conditional_acceptance(1), a1);
  const double l0 = a0 - std::sqrt(a0 * (1 - a0) / 7), l1 = a1 - std::sqrt(a1 * (1 - a1) / 5);
  EXPECT_NEAR(controller.ExpectedTokensLow(1), 1 + l0, 1e-12);
  EXPECT_NEAR(controller.ExpectedTokensLow(2), 1 + l0 + l0 * l1, 1e-12);
  EXPECT_LT(controller.ExpectedTokensLow(2), controller.ExpectedTokens(2));
  // With many trials the bound closes on the mean.
  for (int i = 0; i < 4000; ++i) controller.RecordVerify(1, i % 4 != 0 ? 1 : 0, 1.0);
  EXPECT_NEAR(controller.ExpectedTokensLow(1), controller.ExpectedTokens(1), 0.01);
}

TEST(AdaptiveKTest, CostsAreMovingAveragesAndUnmeasuredLengthsAreInterpolated) {
  AdaptiveK controller(6);
  WarmUp(controller, 1.0);              // rows 1
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
  // Rows 1 again, two verifies after its last measurement: the new sample weighs 0.2 · 2.
  controller.RecordVerify(0, 0, 2.0);
  EXPECT_NEAR(controller.ExpectedCost(0), 1.4, 1e-12);  // 0.6 · 1.0 + 0.4 · 2.0
  controller.RecordVerify(0, 0, 2.4);
  EXPECT_NEAR(controller.ExpectedCost(0), 1.6, 1e-12);  // consecutive: 0.8 · 1.4 + 0.2 · 2.4

  // The per-cycle extend is charged once to every k >= 1, never to plain decoding.
  controller.RecordExtend(0.05);
  EXPECT_NEAR(controller.ExpectedCost(3), 1.3 + 3 * 0.12 + 0.05, 1e-12);
  EXPECT_NEAR(controller.ExpectedCost(0), 1.6, 1e-12);

  // Only the plain step measured: a verify of L rows is priced at L plain steps (r = L), so no
  // draft length can win before one has been measured.
  AdaptiveK plain_only(4);
  WarmUp(plain_only, 2.0);
  EXPECT_NEAR(plain_only.ExpectedCost(1), 4.0, 1e-12);
  EXPECT_NEAR(plain_only.ExpectedCost(4), 10.0, 1e-12);
  EXPECT_EQ(plain_only.Best(), 0);
  // A measured verify cost never extrapolates below the longest measured one.
  AdaptiveK falling(4);
  WarmUp(falling, 2.0);
  falling.RecordVerify(1, 0, 1.5);
  EXPECT_NEAR(falling.VerifyCost(4), 1.5, 1e-12);
}

TEST(AdaptiveKTest, ChoosesPlainDecodingWhenAcceptanceIsNearZero) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(1, 0, 1.05);
  controller.RecordDraftStep(0.05);
  EXPECT_LT(controller.ExpectedTokens(1) / controller.ExpectedCost(1), 1.0);
  EXPECT_EQ(controller.Best(), 0);
}

TEST(AdaptiveKTest, ChoosesPlainDecodingWhenDraftingIsExpensive) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(4, 4, 1.0);
  controller.RecordDraftStep(2.0);  // every draft step costs two verifies
  EXPECT_EQ(controller.Best(), 0);
}

TEST(AdaptiveKTest, ChoosesTheLargestKWhenAcceptanceIsNearOneAndVerifyIsCheap) {
  AdaptiveK controller(4);
  controller.RecordVerify(0, 0, 1.0);
  for (int i = 0; i < 60; ++i) controller.RecordVerify(4, 4, 1.0);  // verifying 5 rows costs as 1
  controller.RecordDraftStep(0.01);
  EXPECT_EQ(controller.Best(), 4);
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
    const int64_t chosen = controller.Best();
    EXPECT_EQ(chosen, best) << "draft cost " << draft_cost;
    EXPECT_LE(chosen, previous) << "draft cost " << draft_cost;
    previous = chosen;
    interior_choices += chosen > 0 && chosen < kMax;
  }
  EXPECT_EQ(previous, 0);            // at 3 s per draft step, plain decoding wins
  EXPECT_GT(interior_choices, 10);   // and the sweep passed through intermediate k
}

TEST(AdaptiveKTest, ProbesTheOtherRegimeWithDoublingGaps) {
  // Half the drafts are accepted and a drafting cycle of k = 1 costs 1.44 plain steps: k = 1 runs at
  // ~1.04x plain, too close to leave plain decoding for (kSwitchMargin), but close enough that
  // optimistic acceptance keeps the probes going. They come in bursts of kProbeBurst cycles
  // separated by gaps of 4, 8, 16, 32, 32, … cycles counted from the end of a burst (no budget).
  AdaptiveK controller(1, /*probe_interval=*/4, /*max_probe_interval=*/32, /*exploration_budget=*/1.0);
  WarmUp(controller, 1.0);
  std::vector<int64_t> burst_starts;
  std::vector<int64_t> burst_lengths;
  bool previous_probe = false;
  int64_t accepted = 0;
  for (int cycle = 0; cycle < 200; ++cycle) {
    const int64_t k = controller.Choose();
    const bool probe = controller.last_was_probe();
    if (probe) {
      EXPECT_EQ(k, 1) << "cycle " << cycle;
      if (!previous_probe) {
        burst_starts.push_back(cycle);
        burst_lengths.push_back(0);
      }
      ++burst_lengths.back();
      controller.RecordDraftStep(0.1);
      controller.RecordVerify(1, accepted++ % 2, 1.3);
      controller.RecordExtend(0.04);
    } else {
      EXPECT_EQ(k, 0) << "cycle " << cycle;
      controller.RecordVerify(0, 0, 1.0);
    }
    previous_probe = probe;
  }
  ASSERT_GE(burst_starts.size(), 6u);
  EXPECT_EQ(burst_starts[0], 0);
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < burst_starts.size(); ++i) {
    gaps.push_back(burst_starts[i] - (burst_starts[i - 1] + kProbeBurst - 1));
  }
  EXPECT_EQ(std::vector<int64_t>(gaps.begin(), gaps.begin() + 5), (std::vector<int64_t>{4, 8, 16, 32, 32}));
  for (const int64_t length : burst_lengths) EXPECT_EQ(length, kProbeBurst);
  EXPECT_EQ(controller.probes(), kProbeBurst * static_cast<int64_t>(burst_starts.size()));
}

TEST(AdaptiveKTest, ProbesPlainWhileDrafting) {
  // Drafting wins: the controller still re-measures the plain step now and then.
  AdaptiveK controller(2, /*probe_interval=*/4, /*max_probe_interval=*/16, /*exploration_budget=*/1.0);
  WarmUp(controller, 1.0);
  for (int i = 0; i < 20; ++i) controller.RecordVerify(2, 2, 1.1);
  controller.RecordDraftStep(0.01);
  int plain_probes = 0;
  for (int cycle = 0; cycle < 100; ++cycle) {
    const int64_t k = controller.Choose();
    if (controller.last_was_probe()) {
      EXPECT_EQ(k, 0);
      ++plain_probes;
      controller.RecordVerify(0, 0, 1.0);
    } else {
      EXPECT_EQ(k, 2);
      controller.RecordVerify(2, 2, 1.1);
    }
  }
  EXPECT_GE(plain_probes, 5);
  EXPECT_LE(plain_probes, 10);
}

TEST(AdaptiveKTest, ProbesStayWithinTheExplorationBudget) {
  // Probes of k = 1 lose 2 s each; at 1 % of the decoded time, one probe per ~200 plain steps.
  AdaptiveK controller(4, /*probe_interval=*/1, /*max_probe_interval=*/1);
  WarmUp(controller, 1.0);
  for (int cycle = 0; cycle < 1000; ++cycle) {
    const int64_t k = controller.Choose();
    controller.RecordVerify(k, 0, k == 0 ? 1.0 : 3.0);
    EXPECT_LE(controller.exploration_seconds(), 0.01 * controller.elapsed_seconds() + 2.0 + 1e-9);
  }
  EXPECT_GE(controller.probes(), 3);
  EXPECT_LE(controller.probes(), 6);
}

TEST(AdaptiveKTest, WholeCycleCostIsTheMedianOfRecentSamples) {
  AdaptiveK controller(3);
  controller.RecordVerify(0, 0, 1.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 1.0);  // parts only
  for (const double s : {2.0, 50.0, 3.0}) controller.RecordCycle(0, s);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 3.0);  // median of {2, 50, 3}
  for (const double s : {4.0, 5.0, 6.0}) controller.RecordCycle(0, s);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 5.0);  // the last five {50, 3, 4, 5, 6} → 5
  controller.RecordCycle(4, 1.0);                      // beyond k_max: ignored
  controller.RecordCycle(1, -1.0);                     // nonsense: ignored
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(1), controller.VerifyCost(2));  // no samples: the parts
  // A drafting length measured at twice its parts scales the parts of the unmeasured ones.
  controller.RecordVerify(1, 1, 2.0);  // Tv(2) = 2 → parts of k = 1: 2
  controller.RecordCycle(1, 4.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(1), 4.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(2), 2.0 * controller.VerifyCost(3));
  // Samples older than 64 verifies drop out; with none left the latest one stands.
  for (int i = 0; i < 70; ++i) controller.RecordVerify(1, 1, 2.0);
  controller.RecordCycle(0, 7.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 7.0);  // the only recent sample
  for (int i = 0; i < 70; ++i) controller.RecordVerify(1, 1, 2.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 7.0);  // none recent: the latest
}

TEST(AdaptiveKTest, BeginRequestRestartsTheWarmUpAndIgnoresItsColdSteps) {
  AdaptiveK fresh(2);
  fresh.BeginRequest();  // nothing learned: a no-op
  EXPECT_EQ(fresh.requests(), 1);
  AdaptiveK controller(2);
  WarmUp(controller, 1.0);
  for (int i = 0; i < 20; ++i) {
    controller.RecordVerify(0, 0, 1.0);
    controller.RecordCycle(0, 1.0);
  }
  controller.BeginRequest();
  EXPECT_EQ(controller.requests(), 2);
  for (int64_t i = 0; i < kWarmUpPlainSteps; ++i) {
    EXPECT_EQ(controller.Choose(), 0);
    EXPECT_FALSE(controller.last_was_probe());
    controller.RecordVerify(0, 0, 5.0);  // cold after the prefill
    controller.RecordCycle(0, 5.0);
  }
  EXPECT_DOUBLE_EQ(controller.VerifyCost(1), 1.0);
  EXPECT_DOUBLE_EQ(controller.ExpectedCost(0), 1.0);
  EXPECT_DOUBLE_EQ(controller.elapsed_seconds(), 3 * 5.0);  // the request's own time only
  controller.RecordVerify(0, 0, 2.0);  // after the warm-up: the moving average again
  EXPECT_DOUBLE_EQ(controller.VerifyCost(1), 0.8 * 1.0 + 0.2 * 2.0);
}

}  // namespace
}  // namespace mtpspec
