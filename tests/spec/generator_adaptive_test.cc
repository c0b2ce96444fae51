// Generate with adaptive k on the fake, weight-free target and drafter of fake_models.h, whose costs
// the loop reads from a fake clock (GenerateOptions::clock), so the machine's load cannot move them: the
// controller's warm-up and probes inside the loop, a controller carried across requests, and the
// drafter's prompt deferred when the controller expects plain decoding; every output equals the
// oracle string (lossless). The controller's own choices are tested in adaptive_k_test.cc.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/adaptive_k.h"
#include "spec/generator.h"
#include "tests/spec/fake_models.h"
#include "tests/spec/generate_test_util.h"

namespace mtpspec {
namespace {

using spec_testing::FakeClock;
using spec_testing::FakeTarget;
using spec_testing::MustGenerate;
using spec_testing::Options;
using spec_testing::OracleLogits;
using spec_testing::OracleRange;
using spec_testing::OracleWithMistakes;
using spec_testing::ProposeCall;
using spec_testing::ScriptedDrafter;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 16;

TEST(GeneratorTest, AdaptiveKMeasuresPlainStepsFirstAndStaysLossless) {
  FakeClock clock;  // the target's costs, as the loop sees them
  FakeTarget target(kVocab, 1024, OracleLogits());
  target.set_clock(&clock);
  target.set_seconds_per_row(20e-6);
  ScriptedDrafter drafter(OracleWithMistakes({9, 13, 40, 41, 200}));
  GenerateOptions options = Options(4, 600);
  options.clock = &clock;
  options.adaptive_k = true;
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.tokens, OracleRange(4, 604));
  ASSERT_GE(target.runs().size(), 1u + kWarmUpPlainSteps);
  for (int64_t i = 1; i <= kWarmUpPlainSteps; ++i) {
    EXPECT_EQ(target.runs()[i].tokens.size(), 1u) << "the first steps measure plain decoding";
  }
  for (const ProposeCall& call : drafter.proposes()) EXPECT_LE(call.k, 4);
  EXPECT_GE(r.stats.k_decisions[0], kWarmUpPlainSteps);
  // The first probe fits the exploration budget well within 600 tokens (the controller's later
  // choices are tested in tests/spec/adaptive_k_simulation_test.cc).
  EXPECT_GT(r.stats.num_drafts, 0);
  ASSERT_GE(r.stats.probe_decisions.size(), 2u);
  EXPECT_GE(r.stats.probe_decisions[1], 1);  // a k = 1 probe
  EXPECT_TRUE(target.violations().empty());
}

TEST(GeneratorTest, AdaptiveControllerCarriedAcrossRequestsStaysLossless) {
  FakeClock clock;  // the target's costs, as the loop sees them
  FakeTarget target(kVocab, 1024, OracleLogits());
  target.set_clock(&clock);
  target.set_seconds_per_row(20e-6);
  ScriptedDrafter drafter(OracleWithMistakes({9, 13, 40, 41, 200}));
  GenerateOptions options = Options(4, 300);
  options.clock = &clock;
  options.adaptive_k = true;
  options.adaptive_controller = std::make_shared<AdaptiveK>(4);
  for (int request = 1; request <= 3; ++request) {
    const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
    EXPECT_EQ(r.tokens, OracleRange(4, 304)) << "request " << request;
    EXPECT_EQ(options.adaptive_controller->requests(), request);
    // Every request starts with the plain warm-up, carried controller or not.
    for (int64_t i = 1; i <= kWarmUpPlainSteps; ++i) EXPECT_EQ(target.runs()[i].tokens.size(), 1u);
    EXPECT_TRUE(target.violations().empty());
  }
  // A controller made for another k_max, or one given without adaptive_k, is refused.
  GenerateOptions wrong = options;
  wrong.k = 3;
  EXPECT_THAT(Generate(target, &drafter, OracleRange(0, 4), wrong).status().message(),
              HasSubstr("adaptive_controller was made for k_max = 4, this request has k = 3"));
  wrong = options;
  wrong.adaptive_k = false;
  EXPECT_THAT(Generate(target, &drafter, OracleRange(0, 4), wrong).status().message(),
              HasSubstr("adaptive_controller is set but adaptive_k is false"));
  EXPECT_EQ(MustGenerate(target, &drafter, OracleRange(0, 4), options).tokens, OracleRange(4, 304));
}

TEST(GeneratorTest, ACarriedControllerThatExpectsPlainDecodingDefersTheDraftersPrompt) {
  // Every draft is wrong and a verify row costs as much as a plain step: once the first request's
  // probes have measured that, later requests decode plainly and the drafter is told to leave the
  // prompt for later (Drafter::DeferPrompt), except in those where a re-check is due.
  FakeClock clock;  // the target's costs, as the loop sees them
  FakeTarget target(kVocab, 1024, OracleLogits());
  target.set_clock(&clock);
  target.set_seconds_per_row(50e-6);
  std::vector<int64_t> every_position(1024);
  for (int64_t p = 0; p < 1024; ++p) every_position[p] = p;
  ScriptedDrafter drafter(OracleWithMistakes(every_position));
  GenerateOptions options = Options(2, 220);  // long enough for the first request's probe (≥ 197 tokens)
  options.clock = &clock;
  options.adaptive_k = true;
  options.adaptive_controller = std::make_shared<AdaptiveK>(2);
  int64_t deferred = 0, defer_calls = 0;
  for (int request = 1; request <= 8; ++request) {
    const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
    EXPECT_EQ(r.tokens, OracleRange(4, 224)) << "request " << request;
    EXPECT_TRUE(target.violations().empty());
    if (request == 1) {
      EXPECT_EQ(r.stats.prompts_deferred, 0);  // a fresh controller needs the prompt
    }
    deferred += r.stats.prompts_deferred;
  }
  defer_calls = drafter.defer_prompt_count();
  EXPECT_GE(deferred, 1);
  EXPECT_EQ(defer_calls, deferred);  // the drafter heard exactly what the statistics say
}

TEST(GeneratorTest, AFreshControllerLetsAShortRequestDecodePlainlyWithoutThePrompt) {
  // 120 tokens cannot pay for a fresh controller's first probe (priced at 2 plain steps, 1% of the
  // request's ~120): the request decodes plainly, the drafter is told to defer the prompt and is
  // never asked for drafts. (The drafter would be right every time: only the budget decides.)
  FakeClock clock;  // the target's costs, as the loop sees them
  FakeTarget target(kVocab, 1024, OracleLogits());
  target.set_clock(&clock);
  target.set_seconds_per_row(20e-6);
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions options = Options(3, 120);
  options.clock = &clock;
  options.adaptive_k = true;
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.tokens, OracleRange(4, 124));
  EXPECT_EQ(r.stats.prompts_deferred, 1);
  EXPECT_EQ(drafter.defer_prompt_count(), 1);
  EXPECT_EQ(r.stats.num_drafts, 0);
  EXPECT_TRUE(drafter.proposes().empty());
  // With room for the probe (240 tokens) the prompt is kept and the drafts are found.
  options.max_new_tokens = 240;
  const GenerateResult longer = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(longer.tokens, OracleRange(4, 244));
  EXPECT_EQ(longer.stats.prompts_deferred, 0);
  EXPECT_EQ(drafter.defer_prompt_count(), 1);
  EXPECT_GT(longer.stats.num_drafts, 0);
}

TEST(GeneratorTest, ACarriedControllerFindsPayingDraftsInASeriesOfShortRequests) {
  // A step costs 200 µs whatever its rows, plus 10 µs a row, and every draft is right: k = 4 makes 5
  // tokens for ~250 µs against 5 plain steps' ~1 ms. Each 150-token request is too short for the
  // first probe on its own budget, so the first decodes plainly (the drafter skips its prompt); the
  // second adds the budget the first left unspent, probes at its warm-up's end and drafts.
  // The target's costs go onto a fake clock, which the loop reads: the machine's load cannot
  // disturb what the controller sees (drafting, sampling and acceptance then cost nothing).
  FakeClock clock;
  FakeTarget target(kVocab, 4096, OracleLogits());
  target.set_seconds_per_run(200e-6);
  target.set_seconds_per_row(10e-6);
  target.set_clock(&clock);
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions options = Options(4, 150);
  options.clock = &clock;
  options.adaptive_k = true;
  options.adaptive_controller = std::make_shared<AdaptiveK>(4);
  const GenerateResult first = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(first.tokens, OracleRange(4, 154));
  EXPECT_EQ(first.stats.prompts_deferred, 1);
  EXPECT_EQ(first.stats.num_drafts, 0);
  const GenerateResult second = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(second.tokens, OracleRange(4, 154));
  EXPECT_EQ(second.stats.prompts_deferred, 0);
  // Drafting pays 4x: after the warm-up and the probe, (nearly) every cycle drafts.
  EXPECT_GT(second.stats.num_drafts, second.stats.verify_steps * 3 / 4) << second.stats.Summary();
  EXPECT_GT(second.stats.num_accepted_tokens, 60) << second.stats.Summary();
  EXPECT_TRUE(target.violations().empty());
}

}  // namespace
}  // namespace mtpspec
