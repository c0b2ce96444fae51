// The draft → verify loop (spec/generator.cc) on the fake, weight-free target and drafter of
// fake_models.h. The target's logits depend on the absolute position only, so the output of every
// request is known in advance (the oracle string at T = 0, the sampler's own draws at T > 0), and
// every forward, rollback and Observe call can be checked against values traced by hand.
#include "spec/generator.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/spec/fake_models.h"
#include "tests/spec/generate_test_util.h"

namespace mtpspec {
namespace {

using spec_testing::FakeClock;
using spec_testing::FakeTarget;
using spec_testing::MustGenerate;
using spec_testing::ObserveCall;
using spec_testing::OracleLogits;
using spec_testing::Options;
using spec_testing::OracleRange;
using spec_testing::OracleToken;
using spec_testing::OracleWithMistakes;
using spec_testing::ProposeCall;
using spec_testing::RunCall;
using spec_testing::ScriptedDrafter;
using spec_testing::ScriptFn;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 16;

int32_t O(int64_t p) { return OracleToken(p); }
int32_t Wrong(int64_t p) { return (OracleToken(p) + 1) % kVocab; }

MATCHER_P3(IsRun, start, tokens, all_logits, "") {
  return arg.start == start && arg.tokens == std::vector<int32_t>(tokens) && arg.all_logits == all_logits;
}
MATCHER_P4(IsObserve, first_position, rows, sequence_size, last_token, "") {
  return arg.first_position == first_position && arg.rows == rows && arg.sequence_size == sequence_size &&
         arg.last_token == last_token;
}
MATCHER_P3(IsPropose, sequence_size, k, proposed, "") {
  return arg.sequence_size == sequence_size && arg.k == k && arg.proposed == std::vector<int32_t>(proposed);
}

// The loop reads the time from GenerateOptions::clock: on a fake clock that only the target's runs
// advance, the request's seconds are exactly the runs' costs (the prompt's run in the prefill, every
// verify in the verify time), and nothing else takes any time.
TEST(GeneratorTest, TheLoopsTimingsComeFromTheGivenClock) {
  FakeClock clock;
  FakeTarget target(kVocab, 64, OracleLogits());
  target.set_clock(&clock);
  target.set_seconds_per_run(0.5);
  target.set_seconds_per_row(0.25);
  ScriptedDrafter drafter(OracleWithMistakes({6, 11}));
  GenerateOptions options = Options(3, 10);
  options.clock = &clock;
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.tokens, OracleRange(4, 14));
  ASSERT_GE(target.runs().size(), 2u);
  double verify = 0;
  for (size_t i = 1; i < target.runs().size(); ++i) verify += 0.5 + 0.25 * target.runs()[i].tokens.size();
  const double prefill = 0.5 + 0.25 * 4;
  EXPECT_EQ(r.stats.prefill_seconds, prefill);
  EXPECT_EQ(r.stats.verify_seconds, verify);
  EXPECT_EQ(r.stats.draft_seconds, 0.0);
  EXPECT_EQ(r.stats.total_seconds, prefill + verify);
  EXPECT_EQ(clock.Seconds(), prefill + verify);
}

// --- hand-traced requests -----------------------------------------------------------------------

// Prompt o0..o3, k = 3, 10 new tokens, the drafter wrong at positions 6 and 11:
//   step 1: n = 4, drafts (o5, x6, o7)   → accept 1, correction o6   → keep 6 positions
//   step 2: n = 6, drafts (o7, o8, o9)   → accept 3, bonus o10       → keep 10
//   step 3: n = 10, k = min(3, 10 − 7 − 1) = 2, drafts (x11, o12) → accept 0, correction o11 → keep 11
//   step 4: n = 11, k = 1, drafts (o12)  → accept 1, bonus o13; the budget is reached → keep 13
TEST(GeneratorTest, HandTracedRequestWithTwoDraftMistakes) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({6, 11}));
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 10));

  EXPECT_EQ(r.tokens, OracleRange(4, 14));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_THAT(target.runs(), ElementsAre(IsRun(0, OracleRange(0, 4), false),
                                         IsRun(4, std::vector<int32_t>{O(4), O(5), Wrong(6), O(7)}, true),
                                         IsRun(6, OracleRange(6, 10), true),
                                         IsRun(10, std::vector<int32_t>{O(10), Wrong(11), O(12)}, true),
                                         IsRun(11, std::vector<int32_t>{O(11), O(12)}, true)));
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{6, 10, 11, 13}));
  EXPECT_EQ(target.cache(), OracleRange(0, 13));  // every committed token and nothing else
  EXPECT_THAT(drafter.proposes(),
              ElementsAre(IsPropose(5, 3, std::vector<int32_t>{O(5), Wrong(6), O(7)}),
                          IsPropose(7, 3, OracleRange(7, 10)),
                          IsPropose(11, 2, std::vector<int32_t>{Wrong(11), O(12)}),
                          IsPropose(12, 1, std::vector<int32_t>{O(12)})));
  // Observe(first, rows): the prefill rows 0..3, then each step's committed rows; none after the
  // final step (the request is over).
  EXPECT_THAT(drafter.observes(), ElementsAre(IsObserve(0, 4, 5, O(4)), IsObserve(4, 2, 7, O(6)),
                                              IsObserve(6, 4, 11, O(10)), IsObserve(10, 1, 12, O(11))));
  EXPECT_TRUE(target.violations().empty()) << target.violations()[0];

  const SpecStats& s = r.stats;
  EXPECT_EQ(s.drafter, "scripted");
  EXPECT_EQ(s.accept_rule, "sampler-equality");
  EXPECT_FALSE(s.lossy);
  EXPECT_FALSE(s.synthetic);
  EXPECT_EQ(s.prompt_tokens, 4);
  EXPECT_EQ(s.generated_tokens, 10);
  EXPECT_EQ(s.verify_steps, 4);
  EXPECT_EQ(s.num_drafts, 4);
  EXPECT_EQ(s.num_draft_tokens, 3 + 3 + 2 + 1);
  EXPECT_EQ(s.num_accepted_tokens, 1 + 3 + 0 + 1);
  EXPECT_EQ(s.accepted_histogram, (std::vector<int64_t>{1, 2, 0, 1}));
  EXPECT_EQ(s.drafted_per_pos, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(s.reached_per_pos, (std::vector<int64_t>{4, 2, 1}));
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(s.k_decisions, (std::vector<int64_t>{0, 1, 1, 2}));
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0 + 5.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.draft_acceptance_rate(), 5.0 / 9.0);
  EXPECT_THAT(s.per_position_acceptance(), ElementsAre(0.75, 0.25, 0.25));
  EXPECT_THAT(s.conditional_acceptance(), ElementsAre(0.75, 0.5, 1.0));
  // The per-length seconds split the verify time exactly, and each cycle contains its verify.
  ASSERT_EQ(s.verify_seconds_by_k.size(), 4u);
  ASSERT_EQ(s.cycle_seconds_by_k.size(), 4u);
  double verify_sum = 0;
  for (size_t k = 0; k < 4; ++k) {
    verify_sum += s.verify_seconds_by_k[k];
    EXPECT_GE(s.cycle_seconds_by_k[k], s.verify_seconds_by_k[k]) << "k = " << k;
  }
  EXPECT_NEAR(verify_sum, s.verify_seconds, 1e-12);
  EXPECT_EQ(s.verify_seconds_by_k[0], 0.0);  // no plain step ran
}

TEST(GeneratorTest, EosInsideAnAcceptedBlockStopsExactlyAtTheEos) {
  // o8 = 11 first occurs at position 8; k = 4 drafts o5..o8, all accepted, bonus o9 not emitted.
  ASSERT_EQ(O(8), 11);
  FakeTarget target(kVocab, 64, OracleLogits());
  target.set_eos({11});
  ScriptedDrafter drafter(OracleWithMistakes({}));
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(4, 20));
  EXPECT_EQ(r.tokens, OracleRange(4, 9));
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{8}));  // rows 4..7 committed; o8 is pending
  EXPECT_EQ(target.cache(), OracleRange(0, 8));
  EXPECT_EQ(r.stats.verify_steps, 1);
  EXPECT_EQ(r.stats.num_accepted_tokens, 4);
  EXPECT_EQ(r.stats.generated_tokens, 5);
  EXPECT_THAT(drafter.observes(), ElementsAre(IsObserve(0, 4, 5, O(4))));

  // With stop_at_eos = false the same request runs to its budget.
  GenerateOptions no_stop = Options(4, 20);
  no_stop.stop_at_eos = false;
  const GenerateResult all = MustGenerate(target, &drafter, OracleRange(0, 4), no_stop);
  EXPECT_EQ(all.tokens, OracleRange(4, 24));
  EXPECT_EQ(all.stop_reason, "max_new_tokens");
}

TEST(GeneratorTest, EosAsACorrectionTokenStopsThere) {
  // Drafts (o5, x6, o7): the correction o6 = 13 is the EOS.
  FakeTarget target(kVocab, 64, OracleLogits());
  target.set_eos({2, O(6)});  // 2 = o9 would come later
  ScriptedDrafter drafter(OracleWithMistakes({6}));
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 20));
  EXPECT_EQ(r.tokens, OracleRange(4, 7));
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{6}));
}

TEST(GeneratorTest, EosAsTheFirstTokenStopsBeforeAnyVerify) {
  FakeTarget target(kVocab, 64, OracleLogits());
  target.set_eos({O(4)});
  ScriptedDrafter drafter(OracleWithMistakes({}));
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 20));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{O(4)}));
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_EQ(target.runs().size(), 1u);
  EXPECT_EQ(r.stats.verify_steps, 0);
  EXPECT_TRUE(drafter.proposes().empty());
}

TEST(GeneratorTest, TokenBudgetCapsTheDraftLength) {
  // 6 new tokens, k = 8: after the prefill's token 5 remain, so at most 4 drafts may be asked for.
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(8, 6));
  EXPECT_EQ(r.tokens, OracleRange(4, 10));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_THAT(drafter.proposes(), ElementsAre(IsPropose(5, 4, OracleRange(5, 9))));
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{9}));
  EXPECT_EQ(r.stats.verify_steps, 1);
}

TEST(GeneratorTest, TinyBudgets) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 1));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{O(4)}));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_EQ(r.stats.verify_steps, 0);
  EXPECT_TRUE(drafter.proposes().empty());

  r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 0));
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_EQ(r.stats.generated_tokens, 0);

  // Two tokens: the second step may carry no draft at all.
  r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 2));
  EXPECT_EQ(r.tokens, OracleRange(4, 6));
  EXPECT_TRUE(drafter.proposes().empty());
  EXPECT_EQ(r.stats.num_drafts, 0);
  EXPECT_EQ(r.stats.verify_steps, 1);
}

TEST(GeneratorTest, CacheCapacityCapsTheDraftLength) {
  // Capacity 12, prompt 4: the first block may hold positions 4..11, i.e. 7 drafts, not 8.
  FakeTarget target(kVocab, 12, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), Options(8, 100));
  EXPECT_EQ(r.tokens, OracleRange(4, 13));
  EXPECT_EQ(r.stop_reason, "capacity");
  EXPECT_THAT(drafter.proposes(), ElementsAre(IsPropose(5, 7, OracleRange(5, 12))));
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{12}));
  EXPECT_TRUE(target.violations().empty());

  // Capacity 9: a 3-draft block fills 4..7, then one plain step fills position 8.
  FakeTarget small(kVocab, 9, OracleLogits());
  r = MustGenerate(small, &drafter, OracleRange(0, 4), Options(3, 100));
  EXPECT_EQ(r.tokens, OracleRange(4, 10));
  EXPECT_EQ(r.stop_reason, "capacity");
  EXPECT_THAT(small.runs(), ElementsAre(IsRun(0, OracleRange(0, 4), false), IsRun(4, OracleRange(4, 8), true),
                                        IsRun(8, std::vector<int32_t>{O(8)}, true)));
  EXPECT_EQ(small.truncations(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(drafter.proposes().size(), 1u);
  EXPECT_EQ(r.stats.k_decisions, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_TRUE(small.violations().empty());

  // A prompt of capacity − 1 tokens: one plain step, then the cache is full.
  FakeTarget tight(kVocab, 5, OracleLogits());
  r = MustGenerate(tight, &drafter, OracleRange(0, 4), Options(3, 100));
  EXPECT_EQ(r.tokens, OracleRange(4, 6));
  EXPECT_EQ(r.stop_reason, "capacity");
  EXPECT_TRUE(tight.violations().empty());
}

TEST(GeneratorTest, PlainDecodingGivesTheOracleString) {
  FakeTarget target(kVocab, 64, OracleLogits());
  const GenerateResult r = MustGenerate(target, nullptr, OracleRange(0, 4), Options(3, 8));
  EXPECT_EQ(r.tokens, OracleRange(4, 12));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");
  EXPECT_EQ(target.truncations(), (std::vector<int64_t>{5, 6, 7, 8, 9, 10, 11}));
  ASSERT_EQ(target.runs().size(), 8u);
  for (size_t i = 1; i < target.runs().size(); ++i) {
    EXPECT_THAT(target.runs()[i], IsRun(3 + static_cast<int64_t>(i), std::vector<int32_t>{O(3 + i)}, true));
  }
  EXPECT_EQ(r.stats.drafter, "none");
  EXPECT_EQ(r.stats.verify_steps, 7);
  EXPECT_EQ(r.stats.num_drafts, 0);
  EXPECT_EQ(r.stats.k_decisions, (std::vector<int64_t>{7}));
  EXPECT_DOUBLE_EQ(r.stats.mean_acceptance_length(), 1.0);

  // k = 0 with a drafter: never asked to propose, but it still observes every committed row.
  ScriptedDrafter drafter(OracleWithMistakes({}));
  const GenerateResult k0 = MustGenerate(target, &drafter, OracleRange(0, 4), Options(0, 8));
  EXPECT_EQ(k0.tokens, r.tokens);
  EXPECT_TRUE(drafter.proposes().empty());
  ASSERT_EQ(drafter.observes().size(), 7u);  // prefill + 6 steps (none after the last)
  for (size_t i = 1; i < drafter.observes().size(); ++i) {
    EXPECT_THAT(drafter.observes()[i], IsObserve(3 + static_cast<int64_t>(i), 1, 5 + static_cast<int64_t>(i), O(4 + i)));
  }
}

// --- speculative == plain, for every k and mistake pattern --------------------------------------

// Checks one speculative request against the plain output of the same request and against
// invariants of the loop that follow from its contract alone.
void CheckAgainstPlain(const FakeTarget& target, const ScriptedDrafter& drafter, const std::vector<int32_t>& prompt,
                       const GenerateOptions& options, const GenerateResult& plain, const GenerateResult& spec,
                       const std::string& label) {
  const int64_t p = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(spec.tokens, plain.tokens) << label;
  ASSERT_EQ(spec.stop_reason, plain.stop_reason) << label;
  ASSERT_TRUE(target.violations().empty()) << label << ": " << target.violations()[0];
  // The absolute token string the target should see: prompt, then the plain output.
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), plain.tokens.begin(), plain.tokens.end());
  // The cache holds every emitted token but the last (which is pending), and nothing else.
  ASSERT_EQ(target.cache(), std::vector<int32_t>(full.begin(), full.end() - 1)) << label;

  // Each verify block: accepted = leading drafts equal to the plain string; the loop then keeps
  // exactly the block's first row plus the accepted drafts.
  const auto& runs = target.runs();
  const auto& truncations = target.truncations();
  ASSERT_EQ(runs.size(), truncations.size() + 1) << label;
  ASSERT_EQ(static_cast<int64_t>(truncations.size()), spec.stats.verify_steps) << label;
  int64_t drafted_total = 0, accepted_total = 0;
  for (size_t i = 1; i < runs.size(); ++i) {
    const int64_t n = runs[i].start;
    ASSERT_EQ(runs[i].tokens[0], full[n]) << label << " step " << i;
    int64_t accepted = 0;
    while (accepted + 1 < static_cast<int64_t>(runs[i].tokens.size()) &&
           runs[i].tokens[accepted + 1] == full[n + 1 + accepted]) {
      ++accepted;
    }
    ASSERT_EQ(truncations[i - 1], n + accepted + 1) << label << " step " << i;
    drafted_total += static_cast<int64_t>(runs[i].tokens.size()) - 1;
    accepted_total += accepted;
    if (i + 1 < runs.size()) {
      ASSERT_EQ(runs[i + 1].start, n + accepted + 1) << label << " step " << i;
    }
  }
  EXPECT_EQ(spec.stats.num_draft_tokens, drafted_total) << label;
  EXPECT_EQ(spec.stats.num_accepted_tokens, accepted_total) << label;
  // With no EOS, every emitted token is the prefill's or one per step plus the accepted drafts.
  EXPECT_EQ(spec.stats.generated_tokens, 1 + spec.stats.verify_steps + spec.stats.num_accepted_tokens) << label;
  EXPECT_EQ(spec.stats.generated_tokens, static_cast<int64_t>(spec.tokens.size())) << label;

  // Never asked for more drafts than the budget and the cache allow, nor more than k.
  for (const ProposeCall& call : drafter.proposes()) {
    const int64_t generated = call.sequence_size - p;
    const int64_t n = call.sequence_size - 1;
    ASSERT_LE(call.k, options.k) << label;
    ASSERT_LE(call.k, options.max_new_tokens - generated - 1) << label;
    ASSERT_LE(call.k, target.capacity() - n - 1) << label;
    ASSERT_GE(call.k, 1) << label;
  }
  // Observe calls tile the committed positions from 0, each seeing the sequence through the newest token.
  const auto& observes = drafter.observes();
  ASSERT_FALSE(observes.empty()) << label;
  ASSERT_EQ(observes[0].first_position, 0) << label;
  for (size_t i = 0; i < observes.size(); ++i) {
    const ObserveCall& o = observes[i];
    ASSERT_GE(o.rows, 1) << label;
    ASSERT_EQ(o.sequence_size, o.first_position + o.rows + 1) << label;
    ASSERT_EQ(o.last_token, full[o.sequence_size - 1]) << label;
    if (i + 1 < observes.size()) {
      ASSERT_EQ(observes[i + 1].first_position, o.first_position + o.rows) << label;
    }
  }
  // Stats add up.
  const SpecStats& s = spec.stats;
  int64_t histogram_total = 0, decisions_total = 0;
  for (int64_t h : s.accepted_histogram) histogram_total += h;
  for (int64_t d : s.k_decisions) decisions_total += d;
  EXPECT_EQ(histogram_total, s.num_drafts) << label;
  EXPECT_EQ(decisions_total, s.verify_steps) << label;
  EXPECT_LE(s.num_accepted_tokens, s.num_draft_tokens) << label;
}

// Every subset of draft mistakes in positions 5..14 (2^10 patterns), every k in 0..8, with greedy
// decoding (drafts = oracle with mistakes) and at T = 0.8 (drafts = the target sampler's own draws
// with mistakes): the speculative output equals the plain output.
TEST(GeneratorTest, SpeculativeOutputEqualsPlainOutputForEveryKAndMistakePattern) {
  const std::vector<int32_t> prompt = OracleRange(0, 4);
  const auto logits = OracleLogits(kVocab, 2.0f);  // at T = 0.8 the oracle token has p ≈ .45
  for (double temperature : {0.0, 0.8}) {
    GenerateOptions plain_options = Options(0, 12);
    plain_options.accept.sampling.temperature = temperature;
    plain_options.accept.sampling.seed = 4242;
    FakeTarget target(kVocab, 64, logits);
    const GenerateResult plain = MustGenerate(target, nullptr, prompt, plain_options);
    // Every token is the sampler's draw keyed by its own absolute position (sampler.h).
    std::vector<int32_t> expected;
    for (int64_t position = 4; position < 16; ++position) {
      const std::vector<float> row = logits(position);
      expected.push_back(SampleToken(row.data(), kVocab, plain_options.accept.sampling, position));
    }
    ASSERT_EQ(plain.tokens, expected);
    if (temperature == 0.0) {
      ASSERT_EQ(plain.tokens, OracleRange(4, 16));
    } else {
      ASSERT_NE(plain.tokens, OracleRange(4, 16)) << "T = 0.8 should leave the oracle somewhere";
    }
    for (uint32_t mask = 0; mask < (1u << 10); ++mask) {
      std::vector<int64_t> mistakes;
      for (int b = 0; b < 10; ++b) {
        if (mask & (1u << b)) mistakes.push_back(5 + b);
      }
      // The drafter's guess for each position: the target sampler's draw, wrong where listed.
      ScriptFn script = [&, mistakes](int64_t position, const DraftSampling& sampling) {
        const std::vector<float> row = logits(position);
        const int32_t right = SampleToken(row.data(), kVocab, sampling.sampling, position);
        const bool wrong = std::find(mistakes.begin(), mistakes.end(), position) != mistakes.end();
        return wrong ? static_cast<int32_t>((right + 1) % kVocab) : right;
      };
      ScriptedDrafter drafter(script);
      for (int64_t k = 0; k <= 8; ++k) {
        GenerateOptions options = plain_options;
        options.k = k;
        const GenerateResult spec = MustGenerate(target, &drafter, prompt, options);
        CheckAgainstPlain(target, drafter, prompt, options, plain, spec,
                          "T=" + std::to_string(temperature) + " mask " + std::to_string(mask) + " k " +
                              std::to_string(k));
        if (HasFailure()) return;
      }
    }
  }
}

// A drafter that returns fewer tokens than asked (here at most 2) is fine.
TEST(GeneratorTest, ShortDraftsAreVerifiedAsProposed) {
  const std::vector<int32_t> prompt = OracleRange(0, 3);
  FakeTarget target(kVocab, 64, OracleLogits());
  const GenerateResult plain = MustGenerate(target, nullptr, prompt, Options(0, 15));
  for (int64_t k = 1; k <= 6; ++k) {
    ScriptedDrafter drafter(OracleWithMistakes({6, 9, 10}));
    drafter.set_max_tokens(2);
    const GenerateResult spec = MustGenerate(target, &drafter, prompt, Options(k, 15));
    CheckAgainstPlain(target, drafter, prompt, Options(k, 15), plain, spec, "k " + std::to_string(k));
    for (const auto& run : target.runs()) EXPECT_LE(run.tokens.size(), 3u);
    // The arrays are [k]; no step drafted a position past the drafter's two.
    ASSERT_EQ(spec.stats.drafted_per_pos.size(), static_cast<size_t>(k));
    for (int64_t i = 2; i < k; ++i) EXPECT_EQ(spec.stats.drafted_per_pos[i], 0) << "k " << k << " position " << i;
  }
}

// --- cancellation -------------------------------------------------------------------------------

TEST(GeneratorTest, OnTokensReturningFalseCancelsAfterThatBatch) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions options = Options(3, 30);
  std::vector<std::vector<int32_t>> batches;
  options.on_tokens = [&](std::span<const int32_t> tokens) {
    batches.emplace_back(tokens.begin(), tokens.end());
    return batches.size() < 2;
  };
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.stop_reason, "cancelled");
  EXPECT_EQ(r.tokens, OracleRange(4, 9));
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<int32_t>{O(4)}));
  EXPECT_EQ(batches[1], OracleRange(5, 9));
  EXPECT_EQ(target.runs().size(), 2u);  // no forward after the cancel
  EXPECT_EQ(r.stats.verify_steps, 1);
  EXPECT_EQ(drafter.proposes().size(), 1u);

  // Cancelling on the very first token: only the prefill ran.
  batches.clear();
  options.on_tokens = [&](std::span<const int32_t> tokens) {
    batches.emplace_back(tokens.begin(), tokens.end());
    return false;
  };
  const GenerateResult first = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(first.stop_reason, "cancelled");
  EXPECT_EQ(first.tokens, (std::vector<int32_t>{O(4)}));
  EXPECT_EQ(target.runs().size(), 1u);
  EXPECT_TRUE(drafter.proposes().empty());
}

TEST(GeneratorTest, OnTokensSeesEveryTokenExactlyOnceInOrder) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({6, 7, 12, 20}));
  GenerateOptions options = Options(4, 25);
  std::vector<int32_t> streamed;
  int64_t calls = 0;
  options.on_tokens = [&](std::span<const int32_t> tokens) {
    ++calls;
    streamed.insert(streamed.end(), tokens.begin(), tokens.end());
    return true;
  };
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(streamed, r.tokens);
  EXPECT_EQ(r.tokens, OracleRange(4, 29));
  EXPECT_EQ(calls, 1 + r.stats.verify_steps);
}

// --- failures from the seams, and reuse ---------------------------------------------------------

TEST(GeneratorTest, TargetAndDrafterErrorsAreReturnedAndTheNextRequestWorks) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({7}));
  target.FailAtRun(3);  // the second verify forward
  auto failed = Generate(target, &drafter, OracleRange(0, 4), Options(3, 12));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.status().message()), ::testing::HasSubstr("injected target failure"));

  target.FailAtRun(0);
  drafter.FailNextPropose();
  failed = Generate(target, &drafter, OracleRange(0, 4), Options(3, 12));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);

  const GenerateResult ok = MustGenerate(target, &drafter, OracleRange(0, 4), Options(3, 12));
  EXPECT_EQ(ok.tokens, OracleRange(4, 16));
  EXPECT_EQ(target.cache(), OracleRange(0, 15));
  EXPECT_EQ(drafter.observes()[0].first_position, 0);  // the drafter was reset too
}

TEST(GeneratorTest, EachRequestStartsFromResetState) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({5}));
  const GenerateResult a = MustGenerate(target, &drafter, OracleRange(0, 4), Options(2, 9));
  const std::vector<int64_t> truncations_a = target.truncations();
  const GenerateResult b = MustGenerate(target, &drafter, OracleRange(0, 4), Options(2, 9));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(target.truncations(), truncations_a);
  EXPECT_EQ(target.reset_count(), 2);
  EXPECT_EQ(drafter.reset_count(), 2);
  // A different prompt afterwards: nothing of the old cache leaks.
  const GenerateResult c = MustGenerate(target, &drafter, OracleRange(0, 9), Options(2, 5));
  EXPECT_EQ(c.tokens, OracleRange(9, 14));
  EXPECT_EQ(target.cache(), OracleRange(0, 13));
}

// --- rules other than sampler-equality through the loop -----------------------------------------

TEST(GeneratorTest, LossyRulesAreMarkedInTheStats) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions options = Options(3, 10);
  options.accept.rule = AcceptRule::kSynthetic;
  options.accept.synthetic_rates = {1.0};
  GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.stats.accept_rule, "synthetic");
  EXPECT_TRUE(r.stats.lossy);
  EXPECT_TRUE(r.stats.synthetic);
  EXPECT_EQ(r.stats.ToJson()["synthetic_acceptance"], true);

  options.accept.rule = AcceptRule::kRelaxed;
  r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.stats.accept_rule, "relaxed");
  EXPECT_TRUE(r.stats.lossy);
  EXPECT_FALSE(r.stats.synthetic);
  EXPECT_EQ(r.tokens, OracleRange(4, 14));  // oracle drafts are the argmax: relaxed accepts them all

  // Synthetic acceptance at rate 1 takes even wrong drafts: the output leaves the oracle string.
  options.accept.rule = AcceptRule::kSynthetic;
  ScriptedDrafter wrong(OracleWithMistakes({5, 6, 7}));
  r = MustGenerate(target, &wrong, OracleRange(0, 4), options);
  EXPECT_EQ(r.tokens[1], Wrong(5));
  EXPECT_EQ(r.stats.num_accepted_tokens, r.stats.num_draft_tokens);
}

TEST(GeneratorTest, RejectionWithGreedyDraftsMatchesPlainGreedyDecoding) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({5, 9, 10, 17}));
  GenerateOptions options = Options(3, 20);
  options.accept.rule = AcceptRule::kRejection;
  const GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), options);
  EXPECT_EQ(r.tokens, OracleRange(4, 24));
  EXPECT_EQ(r.stats.accept_rule, "rejection");
}

}  // namespace
}  // namespace mtpspec
