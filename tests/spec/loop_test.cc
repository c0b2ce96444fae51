// The loop's steps (spec/loop.h) and its observer interface: the records an observer sees add up
// to the request's statistics; a fixed-k run asks no draft-length policy; and the steps compose
// outside Generate, so a loop with its own accept step (here: one that rejects every draft) still
// commits exactly what plain decoding would.
#include "spec/loop.h"

#include <vector>

#include "gtest/gtest.h"
#include "spec/generator.h"
#include "tests/spec/fake_models.h"

namespace mtpspec {
namespace {

using spec_testing::FakeTarget;
using spec_testing::OracleLogits;
using spec_testing::OracleRange;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;

constexpr int64_t kVocab = 16;

class RecordingObserver : public LoopObserver {
 public:
  void OnPrefill(const PrefillRecord& record) override { prefills.push_back(record); }
  void OnCycle(const CycleRecord& record) override { cycles.push_back(record); }
  std::vector<PrefillRecord> prefills;
  std::vector<CycleRecord> cycles;
};

TEST(LoopTest, ObserverRecordsAddUpToTheStatistics) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({6, 11, 15}));
  RecordingObserver observer;
  GenerateOptions options;
  options.k = 3;
  options.max_new_tokens = 20;
  options.observer = &observer;
  auto result = Generate(target, &drafter, OracleRange(0, 4), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, OracleRange(4, 24));

  ASSERT_EQ(observer.prefills.size(), 1u);
  EXPECT_EQ(observer.prefills[0].prompt_tokens, 4);
  EXPECT_TRUE(observer.prefills[0].sampled_first);
  ASSERT_EQ(static_cast<int64_t>(observer.cycles.size()), result->stats.verify_steps);
  int64_t drafted = 0, accepted = 0, committed = 0;
  for (size_t i = 0; i < observer.cycles.size(); ++i) {
    const CycleRecord& c = observer.cycles[i];
    drafted += c.drafted;
    accepted += c.accepted;
    committed += c.committed;
    EXPECT_FALSE(c.probe) << "a fixed-k run makes no probes";
    EXPECT_EQ(c.last, i + 1 == observer.cycles.size()) << "cycle " << i;
    EXPECT_EQ(c.observed, !c.last) << "the drafter observes every cycle but the last";
    EXPECT_LE(c.committed, c.accepted + 1);
    EXPECT_GE(c.cycle_seconds, c.verify_seconds);
  }
  EXPECT_EQ(drafted, result->stats.num_draft_tokens);
  EXPECT_EQ(accepted, result->stats.num_accepted_tokens);
  EXPECT_EQ(1 + committed, static_cast<int64_t>(result->tokens.size()));
  EXPECT_EQ(result->stats.generated_tokens, static_cast<int64_t>(result->tokens.size()));
}

// The steps of a loop whose accept step rejects every draft: each cycle emits the target's own
// draw at the pending position, so the output is plain decoding's.
TEST(LoopTest, StepsComposeWithAReplacedAcceptStep) {
  FakeTarget target(kVocab, 64, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions options;
  options.k = 3;
  options.max_new_tokens = 12;
  options.accept.sampling.temperature = 0.8;
  options.accept.sampling.seed = 7;
  auto plain = Generate(target, nullptr, OracleRange(0, 4), options);
  ASSERT_TRUE(plain.ok()) << plain.status();

  target.Reset();
  drafter.Reset();
  const LoopContext context(target, &drafter, options);
  LoopState state;
  PrefillRecord prefill;
  ASSERT_TRUE(PrefillStep(context, OracleRange(0, 4), nullptr, state, prefill).ok());
  int64_t cycles = 0;
  while (state.stop_reason.empty() && static_cast<int64_t>(state.tokens.size()) < options.max_new_tokens) {
    CycleRecord cycle;
    auto draft = DraftStep(context, state, 3, cycle);
    ASSERT_TRUE(draft.ok()) << draft.status();
    EXPECT_EQ(cycle.drafted, 3);
    auto verified = VerifyStep(context, state, *draft, cycle);
    ASSERT_TRUE(verified.ok()) << verified.status();
    // The replaced step: no draft accepted, row 0's draw emitted.
    AcceptResult reject_all;
    reject_all.tokens = {SampleToken(verified->logits.data<float>(), kVocab, options.accept.sampling,
                                     state.pending_position() + 1)};
    ASSERT_TRUE(CommitStep(context, reject_all, *verified, state, cycle).ok());
    EXPECT_EQ(cycle.committed, 1);
    ++cycles;
  }
  EXPECT_EQ(state.tokens, plain->tokens);
  EXPECT_EQ(cycles, options.max_new_tokens - 1);
  // The target holds exactly the committed rows.
  EXPECT_EQ(target.cache(), std::vector<int32_t>(state.sequence.begin(), state.sequence.end() - 1));
}

}  // namespace
}  // namespace mtpspec
