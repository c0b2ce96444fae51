// SpecStats bookkeeping on hand-counted verify steps: per-position counters, the histogram, the
// derived rates, Merge, and the JSON names (vLLM's where it has one).
#include "spec/stats.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

using ::testing::DoubleEq;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Five steps: (drafted, accepted) = (3, 3), (3, 1), (3, 0), (2, 2), (0, 0).
SpecStats FiveSteps() {
  SpecStats s;
  s.RecordStep(3, 3);
  s.RecordStep(3, 1);
  s.RecordStep(3, 0);
  s.RecordStep(2, 2);
  s.RecordStep(0, 0);
  return s;
}

TEST(StatsTest, RecordStepCountsByHand) {
  const SpecStats s = FiveSteps();
  EXPECT_EQ(s.verify_steps, 5);
  EXPECT_EQ(s.num_drafts, 4);  // the plain step carries no draft
  EXPECT_EQ(s.num_draft_tokens, 11);
  EXPECT_EQ(s.num_accepted_tokens, 6);
  // Position i was drafted in steps with drafted > i.
  EXPECT_EQ(s.drafted_per_pos, (std::vector<int64_t>{4, 4, 3}));
  // ... reached when all positions before i were accepted (accepted ≥ i).
  EXPECT_EQ(s.reached_per_pos, (std::vector<int64_t>{4, 3, 1}));
  // ... accepted when accepted > i.
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(s.accepted_histogram, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(s.k_decisions, (std::vector<int64_t>{1, 0, 1, 3}));
  // The steps with drafts, in order (the plain step is left out, as vLLM's per-step lists do).
  EXPECT_EQ(s.step_drafted, (std::vector<int64_t>{3, 3, 3, 2}));
  EXPECT_EQ(s.step_accepted, (std::vector<int64_t>{3, 1, 0, 2}));
  SpecStats merged = s;
  merged.Merge(FiveSteps());
  EXPECT_EQ(merged.step_drafted.size(), 8u);
}

TEST(StatsTest, DerivedRates) {
  const SpecStats s = FiveSteps();
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0 + 6.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.draft_acceptance_rate(), 6.0 / 11.0);
  EXPECT_THAT(s.per_position_acceptance(), ElementsAre(3.0 / 4, 2.0 / 4, 1.0 / 4));
  EXPECT_THAT(s.conditional_acceptance(), ElementsAre(3.0 / 4, 2.0 / 3, 1.0));
  // Mean acceptance length is also Σ_m (m + 1) · histogram[m] / num_drafts.
  double weighted = 0;
  for (size_t m = 0; m < s.accepted_histogram.size(); ++m) weighted += (m + 1.0) * s.accepted_histogram[m];
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), weighted / s.num_drafts);
  // And per-position unconditional rates sum to the mean accepted count per draft.
  double sum = 0;
  for (double r : s.per_position_acceptance()) sum += r;
  EXPECT_DOUBLE_EQ(sum, 6.0 / 4.0);
}

TEST(StatsTest, EmptyStatsHaveNeutralRates) {
  SpecStats s;
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0);
  EXPECT_DOUBLE_EQ(s.draft_acceptance_rate(), 0.0);
  EXPECT_TRUE(s.per_position_acceptance().empty());
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 0.0);
  s.RecordStep(0, 0);
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0);
  EXPECT_EQ(s.num_drafts, 0);
}

TEST(StatsTest, MergeAddsCountersAndWidensArrays) {
  SpecStats a = FiveSteps();
  a.drafter = "mtp";
  a.accept_rule = "sampler-equality";
  a.generated_tokens = 14;
  a.verify_seconds = 1.5;
  SpecStats b;
  b.RecordStep(5, 4);  // longer than anything in a
  b.generated_tokens = 6;
  b.verify_seconds = 0.5;
  b.lossy = true;
  a.Merge(b);
  EXPECT_EQ(a.verify_steps, 6);
  EXPECT_EQ(a.num_drafts, 5);
  EXPECT_EQ(a.num_draft_tokens, 16);
  EXPECT_EQ(a.num_accepted_tokens, 10);
  EXPECT_EQ(a.generated_tokens, 20);
  EXPECT_DOUBLE_EQ(a.verify_seconds, 2.0);
  EXPECT_EQ(a.drafted_per_pos, (std::vector<int64_t>{5, 5, 4, 1, 1}));
  EXPECT_EQ(a.reached_per_pos, (std::vector<int64_t>{5, 4, 2, 1, 1}));
  EXPECT_EQ(a.accepted_per_pos, (std::vector<int64_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(a.accepted_histogram, (std::vector<int64_t>{1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(a.k_decisions, (std::vector<int64_t>{1, 0, 1, 3, 0, 1}));
  EXPECT_EQ(a.drafter, "mtp");
  EXPECT_TRUE(a.lossy);
  // Merging equals recording every step into one object.
  SpecStats direct = FiveSteps();
  direct.RecordStep(5, 4);
  EXPECT_EQ(a.accepted_per_pos, direct.accepted_per_pos);
  EXPECT_EQ(a.accepted_histogram, direct.accepted_histogram);
  EXPECT_DOUBLE_EQ(a.mean_acceptance_length(), direct.mean_acceptance_length());
  // Merging into an empty object copies the labels.
  SpecStats empty;
  empty.Merge(a);
  EXPECT_EQ(empty.drafter, "mtp");
  EXPECT_EQ(empty.accept_rule, "sampler-equality");
}

TEST(StatsTest, StepSecondsAddUpByDraftLengthAndMerge) {
  SpecStats a;
  a.RecordStepSeconds(0, 0.010, 0.011);
  a.RecordStepSeconds(2, 0.020, 0.030);
  a.RecordStepSeconds(0, 0.012, 0.013);
  EXPECT_THAT(a.verify_seconds_by_k, ElementsAre(DoubleEq(0.022), 0.0, DoubleEq(0.020)));
  EXPECT_THAT(a.cycle_seconds_by_k, ElementsAre(DoubleEq(0.024), 0.0, DoubleEq(0.030)));
  SpecStats b;
  b.RecordStepSeconds(3, 0.040, 0.050);  // longer than anything in a
  a.Merge(b);
  EXPECT_THAT(a.verify_seconds_by_k, ElementsAre(DoubleEq(0.022), 0.0, DoubleEq(0.020), DoubleEq(0.040)));
  EXPECT_THAT(a.cycle_seconds_by_k, ElementsAre(DoubleEq(0.024), 0.0, DoubleEq(0.030), DoubleEq(0.050)));
  const nlohmann::json j = a.ToJson();
  EXPECT_EQ(j["verify_seconds_by_k"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["cycle_seconds_by_k"][3].get<double>(), 0.050);
}

TEST(StatsTest, JsonUsesVllmNamesAndMatchesTheFields) {
  SpecStats s = FiveSteps();
  s.drafter = "lookup";
  s.accept_rule = "rejection";
  s.prompt_tokens = 7;
  s.generated_tokens = 14;
  s.prefill_seconds = 0.5;
  s.total_seconds = 2.5;
  const nlohmann::json j = s.ToJson();
  EXPECT_EQ(j["num_drafts"], 4);
  EXPECT_EQ(j["num_draft_tokens"], 11);
  EXPECT_EQ(j["num_accepted_tokens"], 6);
  EXPECT_EQ(j["num_accepted_tokens_per_pos"], (std::vector<int64_t>{3, 2, 1}));
  EXPECT_DOUBLE_EQ(j["mean_acceptance_length"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["draft_acceptance_rate"].get<double>(), 6.0 / 11.0);
  EXPECT_EQ(j["acceptance_histogram"], (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(j["k_decisions"], (std::vector<int64_t>{1, 0, 1, 3}));
  EXPECT_EQ(j["num_drafted_per_pos"], (std::vector<int64_t>{4, 4, 3}));
  EXPECT_EQ(j["num_reached_per_pos"], (std::vector<int64_t>{4, 3, 1}));
  EXPECT_EQ(j["drafter"], "lookup");
  EXPECT_EQ(j["accept_rule"], "rejection");
  EXPECT_EQ(j["lossy"], false);
  EXPECT_EQ(j["prompt_tokens"], 7);
  EXPECT_EQ(j["generated_tokens"], 14);
  EXPECT_EQ(j["verify_steps"], 5);
  EXPECT_DOUBLE_EQ(j["tokens_per_second"].get<double>(), 14.0 / 2.0);  // decode time = total − prefill
  EXPECT_DOUBLE_EQ(j["time_seconds"]["total"].get<double>(), 2.5);
  ASSERT_EQ(j["per_position_acceptance_rate"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["per_position_acceptance_rate"][1].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["conditional_acceptance_rate"][1].get<double>(), 2.0 / 3.0);
}

TEST(StatsTest, SummaryMentionsTheKeyNumbers) {
  SpecStats s = FiveSteps();
  s.drafter = "mtp";
  s.accept_rule = "synthetic";
  s.lossy = true;
  s.synthetic = true;
  const std::string text = s.Summary();
  EXPECT_THAT(text, HasSubstr("drafter mtp"));
  EXPECT_THAT(text, HasSubstr("LOSSY"));
  EXPECT_THAT(text, HasSubstr("SYNTHETIC"));
  EXPECT_THAT(text, HasSubstr("mean acceptance length 2.500"));
  EXPECT_THAT(text, HasSubstr("drafted 11, accepted 6"));
  EXPECT_THAT(text, Not(HasSubstr("adaptive k")));
}

TEST(StatsTest, SummaryShowsTheAdaptiveControllersDecisions) {
  SpecStats s = FiveSteps();
  s.adaptive_k = true;
  s.RecordStep(0, 0);
  s.RecordProbe(0);
  s.prompts_deferred = 1;
  EXPECT_THAT(s.Summary(), HasSubstr("adaptive k: cycles by k 0:2 1:0 2:1 3:3; "));
  EXPECT_THAT(s.Summary(), HasSubstr("; probes 1; prompts deferred 1\n"));
  EXPECT_EQ(s.ToJson()["adaptive_k"], true);
  // A request that never drafted says why that can be.
  SpecStats plain;
  plain.adaptive_k = true;
  plain.RecordStep(0, 0);
  EXPECT_THAT(plain.Summary(), HasSubstr("probes 0; prompts deferred 0 (no probe: too short for the exploration budget"));
  SpecStats merged;
  merged.Merge(plain);
  EXPECT_TRUE(merged.adaptive_k);
}

// SizeFor gives the arrays their documented lengths before any step, and steps keep them.
TEST(StatsTest, SizeForGivesEveryArrayItsLength) {
  SpecStats s;
  s.SizeFor(4);
  s.RecordStep(2, 1);
  s.RecordStep(0, 0);
  EXPECT_EQ(s.drafted_per_pos, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(s.reached_per_pos, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(s.accepted_histogram, (std::vector<int64_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(s.k_decisions, (std::vector<int64_t>{1, 0, 1, 0, 0}));
  EXPECT_EQ(s.probe_decisions.size(), 5u);
  EXPECT_EQ(s.verify_seconds_by_k.size(), 5u);
  EXPECT_EQ(s.per_position_acceptance().size(), 4u);
  EXPECT_EQ(s.conditional_acceptance().size(), 4u);
}

}  // namespace
}  // namespace mtpspec
