// The batch cost model over a run's cycles (bench/batch_schedule.h). The simulated run follows
// GenerateBatch's rules: with acceptance that is certain (rates of 1 and 0) its cycles equal, cycle
// for cycle, the cycle log of GenerateBatch on fake models, requests finishing apart included. A
// cycle with every chain at k is priced as the steady-state formula prices it; long simulated runs
// commit the acceptance length per cycle; a short batch run needs more cycles than its tokens over
// the acceptance length (its stragglers and its capped last drafts).
#include "bench/batch_schedule.h"

#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/batch.h"
#include "tests/spec/fake_models.h"

namespace mtpspec::bench {
namespace {

using spec_testing::FakeTarget;
using spec_testing::OracleLogits;
using spec_testing::OracleToken;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;

constexpr int64_t kVocab = 16;

// AL(k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j, written out here as the oracle.
double AcceptanceLength(const std::vector<double>& a, int64_t k) {
  double al = 1.0, reach = 1.0;
  for (int64_t i = 0; i < k; ++i) al += (reach *= a[std::min<size_t>(i, a.size() - 1)]);
  return al;
}

// GenerateBatch's cycle log for requests with these budgets, all in the batch from the start.
std::vector<BatchCycle> RealCycles(const std::vector<int64_t>& budgets, int64_t k, const std::vector<double>& rates) {
  std::vector<std::unique_ptr<FakeTarget>> targets;
  std::vector<std::unique_ptr<ScriptedDrafter>> drafters;
  std::vector<BatchSlot> slots;
  std::vector<BatchRequest> requests;
  for (size_t r = 0; r < budgets.size(); ++r) {
    targets.push_back(std::make_unique<FakeTarget>(kVocab, 256, OracleLogits(kVocab, 2.0f)));
    drafters.push_back(std::make_unique<ScriptedDrafter>(OracleWithMistakes({5, 9}, kVocab)));
    slots.push_back({targets.back().get(), drafters.back().get()});
    BatchRequest& request = requests.emplace_back();
    for (int64_t p = 0; p < 4; ++p) request.prompt.push_back(OracleToken(p, kVocab));
    request.options.k = k;
    request.options.max_new_tokens = budgets[r];
    request.options.stop_at_eos = false;
    request.options.accept.rule = AcceptRule::kSynthetic;
    request.options.accept.synthetic_rates = rates;
    request.options.accept.sampling.temperature = 1.0;
    request.options.accept.sampling.seed = 7 + r;
  }
  absl::StatusOr<BatchResult> result = GenerateBatch(slots, requests);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->stats.cycle_log : std::vector<BatchCycle>{};
}

TEST(BatchScheduleTest, WithCertainAcceptanceTheSimulatedCyclesAreGenerateBatchs) {
  const std::vector<int64_t> budgets = {9, 20, 33, 14, 1};
  for (const std::vector<double>& rates : {std::vector<double>{1.0}, std::vector<double>{0.0},
                                           std::vector<double>{1.0, 1.0, 0.0}}) {
    for (int64_t k : {0, 1, 3, 4}) {
      const std::string where = absl::StrCat("k = ", k, ", first rate ", rates[0], ", ", rates.size(), " rates");
      std::mt19937_64 rng(1);
      const std::vector<BatchCycle> simulated = SimulateBatchRun(budgets, k, rates, rng);
      const std::vector<BatchCycle> real = RealCycles(budgets, k, rates);
      ASSERT_EQ(simulated.size(), real.size()) << where;
      for (size_t c = 0; c < real.size(); ++c) {
        EXPECT_EQ(simulated[c].requests, real[c].requests) << where << ", cycle " << c;
        EXPECT_EQ(simulated[c].draft_lengths, real[c].draft_lengths) << where << ", cycle " << c;
        EXPECT_EQ(simulated[c].verify_rows, real[c].verify_rows) << where << ", cycle " << c;
      }
      EXPECT_LT(real.back().requests, 4) << where << ": the requests finish apart";
    }
  }
}

BatchCostTable SmallTable() {
  BatchCostTable t;
  t.batches = {1, 2, 4};
  t.verify = {{1.0, 1.5, 2.0}, {1.2, 2.0, 2.8}, {1.6, 3.0, 4.4}};  // [B][L]
  t.draft_step = {0.10, 0.12, 0.16};
  t.extend = {0.05, 0.07, 0.09};
  return t;
}

TEST(BatchScheduleTest, ACycleOfFullChainsCostsWhatTheSteadyStateFormulaSays) {
  const BatchCostTable t = SmallTable();
  BatchCycle full;  // B = 2, k = 2: T(2, 3) + 2 · D(2) + X(2)
  full.requests = 2;
  full.draft_lengths = {2, 2};
  full.verify_rows = 6;
  EXPECT_DOUBLE_EQ(PriceCycle(t, full), 2.8 + 2 * 0.12 + 0.07);

  BatchCycle plain;  // k = 0: the verify alone
  plain.requests = 4;
  plain.draft_lengths = {0, 0, 0, 0};
  plain.verify_rows = 4;
  EXPECT_DOUBLE_EQ(PriceCycle(t, plain), 1.6);

  BatchCycle mixed;  // one chain at 2, one at 0: 2 rows each on average, two depths of one chain
  mixed.requests = 2;
  mixed.draft_lengths = {2, 0};
  mixed.verify_rows = 4;
  EXPECT_DOUBLE_EQ(PriceCycle(t, mixed), 2.0 + 2 * 0.10 + 0.05);

  // Between the table's points: 3 requests is halfway from B = 2 to B = 4, 2.5 rows halfway from 2 to 3.
  EXPECT_DOUBLE_EQ(t.Verify(3.0, 2.0), (2.0 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(t.Verify(2.0, 2.5), (2.0 + 2.8) / 2);
  EXPECT_DOUBLE_EQ(t.DraftStep(3.0), 0.14);
  EXPECT_DOUBLE_EQ(t.Verify(16.0, 9.0), 4.4) << "clamped to the table's last point";
  EXPECT_DOUBLE_EQ(PriceCycles(t, {full, plain}), PriceCycle(t, full) + PriceCycle(t, plain));
}

TEST(BatchScheduleTest, ALongRunCommitsTheAcceptanceLengthPerCycle) {
  const std::vector<double> rates = {0.88, 0.75, 0.58};
  for (int64_t k : {1, 2, 4}) {
    std::mt19937_64 rng(3);
    const int64_t budget = 200001;
    const std::vector<BatchCycle> cycles = SimulateBatchRun({budget}, k, rates, rng);
    const double per_cycle = static_cast<double>(budget - 1) / static_cast<double>(cycles.size());
    EXPECT_NEAR(per_cycle / AcceptanceLength(rates, k), 1.0, 0.01) << "k = " << k;
  }
}

TEST(BatchScheduleTest, AShortBatchRunNeedsMoreCyclesThanItsTokensOverTheAcceptanceLength) {
  const BatchCostTable t = SmallTable();
  const std::vector<double> rates = {0.71, 0.54, 0.59};
  const int64_t budget = 48, k = 3;
  const SimulatedRuns one = ExpectedBatchRun(t, 1, budget, k, rates, 2000, 5);
  const SimulatedRuns four = ExpectedBatchRun(t, 4, budget, k, rates, 2000, 5);
  const double steady_cycles = (budget - 1) / AcceptanceLength(rates, k);
  EXPECT_GT(one.cycles, steady_cycles) << "the last drafts are capped by the budget";
  EXPECT_GT(four.cycles, one.cycles + 1.0) << "the batch runs until its slowest request ends";
  // Every cycle of the single request prices between a plain step and a full k = 3 cycle.
  EXPECT_GE(one.seconds, one.cycles * 1.0);
  EXPECT_LE(one.seconds, one.cycles * (2.0 + 3 * 0.10 + 0.05) + 1e-9);
}

}  // namespace
}  // namespace mtpspec::bench
