// Prompt-lookup drafting on hand-made sequences, the hybrid's choice between lookup and its
// fallback, and lookup drafting through the loop on a periodic oracle string (where every
// proposal is right).
#include "spec/lookup_drafter.h"

#include <memory>
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

std::vector<int32_t> Propose(LookupDrafter& drafter, const std::vector<int32_t>& sequence, int64_t k,
                             bool sample = false) {
  DraftSampling sampling;
  sampling.sample = sample;
  auto draft = drafter.Propose(sequence, k, sampling);
  EXPECT_TRUE(draft.ok()) << draft.status();
  EXPECT_TRUE(draft->probs.empty());
  return draft->tokens;
}

TEST(LookupDrafterTest, ProposesWhatFollowedTheEarlierOccurrenceOfTheSuffix) {
  LookupDrafter drafter(LookupOptions{});
  // Suffix (1, 2) occurred at 0, followed by 3, 4, 1, ...
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 4, 1, 2}, 3), (std::vector<int32_t>{3, 4, 1}));
  // Fewer tokens follow the match than asked for: propose what there is.
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 4, 1, 2}, 10), (std::vector<int32_t>{3, 4, 1, 2}));
}

TEST(LookupDrafterTest, PrefersTheMostRecentOccurrence) {
  LookupDrafter drafter(LookupOptions{});
  // Only the 1-gram (1) matches, at 1 and at 3; the later one (followed by 8, 1) wins.
  EXPECT_EQ(Propose(drafter, {5, 1, 7, 1, 8, 1}, 5), (std::vector<int32_t>{8, 1}));
}

TEST(LookupDrafterTest, PrefersTheLongestMatchingNgram) {
  LookupDrafter drafter(LookupOptions{});
  // (2, 3) matches at 1 (→ 0, 3, 5); the 1-gram (3) matches more recently at 4 (→ 5, 2, 3), but the
  // longer match wins.
  EXPECT_EQ(Propose(drafter, {9, 2, 3, 0, 3, 5, 2, 3}, 3), (std::vector<int32_t>{0, 3, 5}));
}

TEST(LookupDrafterTest, NoMatchOrNoRoomGivesNothing) {
  LookupDrafter drafter(LookupOptions{});
  EXPECT_TRUE(Propose(drafter, {1, 2, 3}, 4).empty());
  EXPECT_TRUE(Propose(drafter, {7}, 4).empty());
  EXPECT_TRUE(Propose(drafter, {1, 2, 1, 2}, 0).empty());
  // min_ngram 2: the lone 1-gram match of (4) does not count.
  LookupOptions options;
  options.min_ngram = 2;
  LookupDrafter strict(options);
  EXPECT_TRUE(Propose(strict, {4, 7, 4}, 3).empty());
  EXPECT_EQ(Propose(drafter, {4, 7, 4}, 3), (std::vector<int32_t>{7, 4}));
}

TEST(LookupDrafterTest, MaxKCapsTheProposal) {
  LookupOptions options;
  options.max_k = 2;
  LookupDrafter drafter(options);
  EXPECT_EQ(Propose(drafter, {1, 2, 3, 4, 5, 1}, 8), (std::vector<int32_t>{2, 3}));
}

TEST(LookupDrafterTest, HybridUsesLookupWhenItMatchesAndTheFallbackOtherwise) {
  auto fallback_owned = std::make_unique<ScriptedDrafter>([](int64_t, const DraftSampling&) { return 15; });
  ScriptedDrafter* fallback = fallback_owned.get();
  HybridDrafter hybrid(std::make_unique<LookupDrafter>(LookupOptions{}), std::move(fallback_owned));
  DraftSampling greedy;
  auto draft = hybrid.Propose(std::vector<int32_t>{1, 2, 3, 1}, 2, greedy);
  ASSERT_TRUE(draft.ok());
  EXPECT_EQ(draft->tokens, (std::vector<int32_t>{2, 3}));  // lookup
  EXPECT_TRUE(fallback->proposes().empty());
  draft = hybrid.Propose(std::vector<int32_t>{1, 2, 3}, 2, greedy);
  ASSERT_TRUE(draft.ok());
  EXPECT_EQ(draft->tokens, (std::vector<int32_t>{15, 15}));  // no match: fallback
  // Sampled drafts need a draft distribution, which lookup has not: always the fallback.
  DraftSampling sampled;
  sampled.sample = true;
  draft = hybrid.Propose(std::vector<int32_t>{1, 2, 3, 1}, 2, sampled);
  ASSERT_TRUE(draft.ok());
  EXPECT_EQ(draft->tokens, (std::vector<int32_t>{15, 15}));
  // Observe reaches the fallback, so its state stays current whichever drafter proposed.
  ASSERT_TRUE(hybrid.Observe(std::vector<int32_t>{1, 2, 3, 1}, 1, 3, TargetStep{}).ok());
  ASSERT_EQ(fallback->observes().size(), 1u);
  EXPECT_EQ(fallback->observes()[0].first_position, 1);
  EXPECT_EQ(fallback->observes()[0].rows, 3);
}

// The oracle string repeats every 16 tokens and its 3-grams are unique within a period, so once the
// prompt holds a full period every lookup proposal is exactly right.
TEST(LookupDrafterTest, OnAPeriodicStringEveryLookupDraftIsAccepted) {
  FakeTarget target(16, 128, OracleLogits());
  LookupDrafter drafter(LookupOptions{});
  GenerateOptions options;
  options.k = 5;
  options.max_new_tokens = 40;
  auto r = Generate(target, &drafter, OracleRange(0, 20), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, OracleRange(20, 60));
  EXPECT_GT(r->stats.num_draft_tokens, 0);
  EXPECT_EQ(r->stats.num_accepted_tokens, r->stats.num_draft_tokens);
  EXPECT_EQ(r->stats.drafter, "lookup");
  // k = 5 and all accepted: 6 tokens per verify after the first; 39 = 6 · 6 + 3.
  EXPECT_EQ(r->stats.verify_steps, 7);

  // A hybrid with a bad fallback still decodes the oracle string: lookup always matches here.
  HybridDrafter hybrid(std::make_unique<LookupDrafter>(LookupOptions{}),
                       std::make_unique<ScriptedDrafter>(OracleWithMistakes({20, 21, 22, 23, 24, 25})));
  r = Generate(target, &hybrid, OracleRange(0, 20), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, OracleRange(20, 60));
  EXPECT_EQ(r->stats.num_accepted_tokens, r->stats.num_draft_tokens);
}

}  // namespace
}  // namespace mtpspec
