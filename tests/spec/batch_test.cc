// GenerateBatch (spec/batch.h) on fake models: every request's tokens and statistics equal the
// same request run alone through Generate for batch sizes 1..8, mixed k (0 included), mixed
// temperatures and requests that finish mid-batch; freed slots take queued requests; the k schedule
// sets each cycle's k by batch size; the statistics add up; and a request that is refused or fails
// gets its own error while the others finish as if alone.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/batch.h"
#include "tests/spec/fake_models.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using spec_testing::FakeClock;
using spec_testing::FakeTarget;
using spec_testing::OracleLogits;
using spec_testing::OracleToken;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;

constexpr int64_t kVocab = 16;
constexpr int64_t kCapacity = 256;

// A batch verifier over fake targets: Run on each in turn, as a real batched forward gives each
// sequence its own forward's result. On a failure it rolls the earlier targets back, so every target
// is as it was (the BatchVerifier contract).
class FakeBatchVerifier : public BatchVerifier {
 public:
  bool CanBatch(const Target&) const override { return true; }
  absl::StatusOr<BatchVerification> VerifyBatch(std::span<Target* const> targets,
                                                std::span<const std::vector<int32_t>> blocks) override {
    ++calls_;
    BatchVerification out;
    for (size_t i = 0; i < targets.size(); ++i) {
      absl::StatusOr<TargetStep> step = targets[i]->Run(blocks[i], /*all_logits=*/true);
      if (!step.ok()) {
        for (size_t j = 0; j < i; ++j) {
          if (absl::Status s = targets[j]->Truncate(targets[j]->length() - static_cast<int64_t>(blocks[j].size()));
              !s.ok()) {
            return s;
          }
        }
        return step.status();
      }
      out.steps.push_back(std::move(*step));
      out.rows += static_cast<int64_t>(blocks[i].size());
    }
    largest_ = std::max<int64_t>(largest_, static_cast<int64_t>(targets.size()));
    return out;
  }
  int64_t calls() const { return calls_; }
  int64_t largest() const { return largest_; }

 private:
  int64_t calls_ = 0, largest_ = 0;
};

// B slots of fake targets and scripted drafters (drafts with mistakes every few positions).
struct FakeSlots {
  explicit FakeSlots(int64_t b, float peak = 2.0f) {
    for (int64_t i = 0; i < b; ++i) {
      targets.push_back(std::make_unique<FakeTarget>(kVocab, kCapacity, OracleLogits(kVocab, peak)));
      drafters.push_back(std::make_unique<ScriptedDrafter>(OracleWithMistakes({7, 8, 15, 23, 30, 31, 44}, kVocab)));
      slots.push_back({targets.back().get(), drafters.back().get()});
    }
  }
  std::vector<std::unique_ptr<FakeTarget>> targets;
  std::vector<std::unique_ptr<ScriptedDrafter>> drafters;
  std::vector<BatchSlot> slots;
};

// Request r of a mixed queue: its own prompt length, k (0 … 4), temperature, seed and budget.
BatchRequest MixedRequest(int64_t r) {
  BatchRequest request;
  for (int64_t p = 0; p < 3 + r % 5; ++p) request.prompt.push_back(OracleToken(p, kVocab));
  GenerateOptions& o = request.options;
  o.k = r % 5;
  o.max_new_tokens = 6 + (r * 7) % 29;
  o.accept.sampling.temperature = std::vector<double>{0.0, 0.7, 1.0}[r % 3];
  o.accept.sampling.seed = 100 + r;
  o.stop_at_eos = false;
  return request;
}

GenerateResult Alone(const BatchRequest& request) {
  FakeTarget target(kVocab, kCapacity, OracleLogits(kVocab, 2.0f));
  ScriptedDrafter drafter(OracleWithMistakes({7, 8, 15, 23, 30, 31, 44}, kVocab));
  auto result = Generate(target, &drafter, request.prompt, request.options);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

void ExpectSameAsAlone(const BatchRequestResult& batched, const BatchRequest& request, const std::string& where) {
  ASSERT_TRUE(batched.status.ok()) << where << ": " << batched.status;
  const GenerateResult alone = Alone(request);
  EXPECT_EQ(batched.result.tokens, alone.tokens) << where;
  EXPECT_EQ(batched.result.stop_reason, alone.stop_reason) << where;
  EXPECT_EQ(batched.result.stats.num_drafts, alone.stats.num_drafts) << where;
  EXPECT_EQ(batched.result.stats.num_accepted_tokens, alone.stats.num_accepted_tokens) << where;
  EXPECT_EQ(batched.result.stats.accepted_per_pos, alone.stats.accepted_per_pos) << where;
  EXPECT_EQ(batched.result.stats.verify_steps, alone.stats.verify_steps) << where;
}

// The batch loop and its requests read the time from the clocks they are given: on a fake clock
// that only the targets' runs advance, the batch's seconds are exactly the runs' costs, split into
// the prefills and the verifies, and no request ends after the batch.
TEST(BatchTest, TheBatchsTimingsComeFromTheGivenClock) {
  FakeClock clock;
  FakeSlots fake(3);
  for (const auto& target : fake.targets) {
    target->set_clock(&clock);
    target->set_seconds_per_run(0.5);
    target->set_seconds_per_row(0.25);
  }
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 7; ++r) {
    requests.push_back(MixedRequest(r));
    requests.back().options.clock = &clock;
  }
  BatchOptions options;
  options.verifier = &verifier;
  options.clock = &clock;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const BatchStats& stats = result->stats;
  EXPECT_GT(stats.prefill_seconds, 0.0);
  EXPECT_GT(stats.verify_seconds, 0.0);
  EXPECT_EQ(stats.draft_seconds, 0.0);
  EXPECT_EQ(stats.total_seconds, clock.Seconds());
  EXPECT_EQ(stats.prefill_seconds + stats.verify_seconds, stats.total_seconds);
  for (const BatchRequestResult& r : result->requests) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_LE(r.latency_seconds, stats.total_seconds);
    EXPECT_GE(r.latency_seconds, r.queued_seconds);
  }
}

TEST(BatchTest, EveryRequestEqualsItselfRunAloneForBatchSizesOneToEight) {
  for (int64_t b = 1; b <= 8; ++b) {
    FakeSlots fake(b);
    FakeBatchVerifier verifier;
    std::vector<BatchRequest> requests;
    for (int64_t r = 0; r < 2 * b + 3; ++r) requests.push_back(MixedRequest(r));
    BatchOptions options;
    options.verifier = &verifier;
    auto result = GenerateBatch(fake.slots, requests, options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->requests.size(), requests.size());
    int64_t rows = 0, tokens = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      ExpectSameAsAlone(result->requests[r], requests[r], absl::StrCat("B = ", b, ", request ", r));
      const SpecStats& s = result->requests[r].result.stats;
      rows += s.verify_steps + s.num_draft_tokens;  // each verify: the pending token plus the drafts
      tokens += static_cast<int64_t>(result->requests[r].result.tokens.size());
      EXPECT_GE(result->requests[r].slot, 0);
      EXPECT_LT(result->requests[r].slot, b);
      EXPECT_GE(result->requests[r].latency_seconds, result->requests[r].queued_seconds);
    }
    const BatchStats& stats = result->stats;
    EXPECT_EQ(stats.verify_rows, rows) << "B = " << b;
    EXPECT_EQ(stats.generated_tokens, tokens);
    EXPECT_EQ(stats.failed, 0);
    EXPECT_EQ(stats.forwards, stats.cycles) << "one forward per cycle when every request batches";
    EXPECT_EQ(stats.batched_forwards, verifier.calls());
    EXPECT_EQ(verifier.largest(), b) << "the batch fills every slot";
    EXPECT_LE(stats.mean_batch(), static_cast<double>(b));
    int64_t cycles = 0;
    for (int64_t n : stats.batch_histogram) cycles += n;
    EXPECT_EQ(cycles, stats.cycles);
    EXPECT_EQ(stats.batch_histogram.size(), static_cast<size_t>(b + 1));
    // The cycle log adds up to the totals and to what the requests recorded on their own.
    ASSERT_EQ(stats.cycle_log.size(), static_cast<size_t>(stats.cycles));
    std::vector<int64_t> histogram(b + 1, 0);
    int64_t logged_rows = 0, logged_drafts = 0, requests_drafts = 0;
    for (const BatchCycle& c : stats.cycle_log) {
      ++histogram[c.requests];
      ASSERT_EQ(c.draft_lengths.size(), static_cast<size_t>(c.requests)) << "every request drafts a chain";
      int64_t rows = 0;
      for (int64_t k : c.draft_lengths) {
        EXPECT_GE(k, 0);
        EXPECT_LE(k, 4);
        rows += k + 1;
        logged_drafts += k;
      }
      EXPECT_EQ(c.verify_rows, rows) << "a chain verifies its pending token and its drafts";
      EXPECT_GE(c.verify_seconds, 0.0);
      logged_rows += c.verify_rows;
    }
    for (const BatchRequestResult& r : result->requests) requests_drafts += r.result.stats.num_draft_tokens;
    EXPECT_EQ(histogram, stats.batch_histogram);
    EXPECT_EQ(logged_rows, stats.verify_rows);
    EXPECT_EQ(logged_drafts, requests_drafts);
    for (const auto& fake_target : fake.targets) EXPECT_THAT(fake_target->violations(), ::testing::IsEmpty());
  }
}

TEST(BatchTest, WithoutAVerifierEachRequestVerifiesAloneAndTheTokensAreTheSame) {
  FakeSlots fake(3);
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 7; ++r) requests.push_back(MixedRequest(r));
  auto result = GenerateBatch(fake.slots, requests);
  ASSERT_TRUE(result.ok()) << result.status();
  for (size_t r = 0; r < requests.size(); ++r) ExpectSameAsAlone(result->requests[r], requests[r], absl::StrCat(r));
  EXPECT_EQ(result->stats.batched_forwards, 0);
  EXPECT_GT(result->stats.forwards, result->stats.cycles);
}

TEST(BatchTest, AFinishedRequestsSlotTakesTheNextQueuedRequest) {
  FakeSlots fake(2);
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests = {MixedRequest(0), MixedRequest(1), MixedRequest(2)};
  requests[0].options.max_new_tokens = 2;   // leaves after a cycle or two
  requests[1].options.max_new_tokens = 40;
  requests[2].options.max_new_tokens = 10;
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->requests[0].slot, 0);
  EXPECT_EQ(result->requests[1].slot, 1);
  EXPECT_EQ(result->requests[2].slot, 0) << "the queued request takes the slot request 0 left";
  EXPECT_GE(result->requests[2].queued_seconds, result->requests[0].latency_seconds);
  EXPECT_LT(result->requests[2].latency_seconds, result->requests[1].latency_seconds)
      << "it ran beside request 1, not after it";
  for (size_t r = 0; r < requests.size(); ++r) ExpectSameAsAlone(result->requests[r], requests[r], absl::StrCat(r));
}

TEST(BatchTest, TheKScheduleSetsEachCyclesDraftLengthByBatchSize) {
  FakeSlots fake(4);
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 4; ++r) {
    requests.push_back(MixedRequest(r));
    requests.back().options.max_new_tokens = 30;
    requests.back().options.k = 5;  // replaced by the schedule
  }
  requests[0].options.max_new_tokens = 4;  // the batch shrinks to 3 once it leaves
  BatchOptions options;
  options.verifier = &verifier;
  options.k_schedule = {{3, 3}, {8, 1}};  // k = 3 for up to 3 requests, 1 for 4 to 8
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<int64_t>& first = result->requests[0].result.stats.k_decisions;
  for (size_t k = 2; k < first.size(); ++k) EXPECT_EQ(first[k], 0) << "request 0 only ran in a batch of 4";
  int64_t long_cycles = 0;
  for (int64_t r = 1; r < 4; ++r) long_cycles += result->requests[r].result.stats.k_decisions.at(3);
  EXPECT_GT(long_cycles, 0) << "after request 0 left, the batch of 3 drafted k = 3";
  for (int64_t r = 1; r < 4; ++r) {
    const std::vector<int64_t>& k_used = result->requests[r].result.stats.k_decisions;
    for (size_t k = 4; k < k_used.size(); ++k) EXPECT_EQ(k_used[k], 0) << "request " << r << " never drafts past 3";
  }
  // Sampler-equality stays lossless whatever k the schedule picks.
  for (size_t r = 0; r < requests.size(); ++r) {
    GenerateOptions plain = requests[r].options;
    plain.k = 0;
    FakeTarget target(kVocab, kCapacity, OracleLogits(kVocab, 2.0f));
    auto alone = Generate(target, nullptr, requests[r].prompt, plain);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(result->requests[r].result.tokens, alone->tokens) << r;
  }
}

TEST(BatchTest, ARefusedRequestGetsItsOwnErrorAndTheOthersRunOn) {
  FakeSlots fake(3);
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 6; ++r) requests.push_back(MixedRequest(r));
  requests[1].options.k = 99;           // outside [0, 15]
  requests[3].prompt = {1, 2, 400};     // outside the vocabulary
  requests[4].prompt.clear();           // empty
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stats.failed, 3);
  EXPECT_THAT(result->requests[1].status.message(), HasSubstr("request 1: k must be in [0, 15]"));
  EXPECT_THAT(result->requests[3].status.message(), HasSubstr("request 3: prompt token [2] = 400"));
  EXPECT_THAT(result->requests[4].status.message(), HasSubstr("request 4: the prompt is empty"));
  for (int64_t r : {0, 2, 5}) ExpectSameAsAlone(result->requests[r], requests[r], absl::StrCat(r));
}

TEST(BatchTest, ARequestThatFailsMidwayLeavesAndTheOthersFinishAsIfAlone) {
  FakeSlots fake(3);
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 3; ++r) {
    requests.push_back(MixedRequest(r));
    requests.back().options.k = 3;
    requests.back().options.max_new_tokens = 30;
  }
  fake.drafters[1]->FailNextPropose();  // slot 1's first draft fails
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stats.failed, 1);
  EXPECT_THAT(result->requests[1].status.message(), HasSubstr("request 1: injected drafter failure"));
  EXPECT_EQ(result->requests[1].result.tokens.size(), 1u) << "it keeps what it produced: the prefill's token";
  ExpectSameAsAlone(result->requests[0], requests[0], "0");
  ExpectSameAsAlone(result->requests[2], requests[2], "2");
}

TEST(BatchTest, NonFiniteLogitsInABatchedVerifyFailOnlyTheirRequest) {
  FakeSlots fake(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  fake.targets[0] = std::make_unique<FakeTarget>(kVocab, kCapacity, [nan](int64_t position) {
    std::vector<float> logits = OracleLogits(kVocab, 2.0f)(position);
    if (position == 12) logits[3] = nan;
    return logits;
  });
  fake.slots[0].target = fake.targets[0].get();
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests = {MixedRequest(0), MixedRequest(1)};
  for (BatchRequest& r : requests) r.options.max_new_tokens = 30;
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->requests[0].status.message(), HasSubstr("not finite at position"));
  ExpectSameAsAlone(result->requests[1], requests[1], "1");
}

TEST(BatchTest, AFailedBatchedForwardIsRetriedAloneAndLosesNothing) {
  FakeSlots fake(3);
  fake.targets[2]->FailAtRun(3);  // the batch's second verify fails on slot 2's target, once
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 3; ++r) requests.push_back(MixedRequest(r + 2));
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stats.failed, 0);
  EXPECT_GT(result->stats.forwards, result->stats.batched_forwards) << "the failed cycle verified alone";
  for (size_t r = 0; r < requests.size(); ++r) ExpectSameAsAlone(result->requests[r], requests[r], absl::StrCat(r));
}

TEST(BatchTest, BatchWideMistakesAreRefusedBeforeAnythingRuns) {
  FakeSlots fake(2);
  std::vector<BatchRequest> requests = {MixedRequest(0), MixedRequest(1)};
  auto none = GenerateBatch({}, requests);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("batch size B >= 1"));

  std::vector<BatchSlot> shared = {fake.slots[0], fake.slots[0]};
  EXPECT_THAT(GenerateBatch(shared, requests).status().message(), HasSubstr("slot 1 shares its target"));
  std::vector<BatchSlot> shared_drafter = {fake.slots[0], {fake.slots[1].target, fake.slots[0].drafter}};
  EXPECT_THAT(GenerateBatch(shared_drafter, requests).status().message(), HasSubstr("slot 1 shares its drafter"));
  std::vector<BatchSlot> empty_slot = {fake.slots[0], {nullptr, nullptr}};
  EXPECT_THAT(GenerateBatch(empty_slot, requests).status().message(), HasSubstr("slot 1 has no target"));

  BatchOptions bad_k;
  bad_k.k_schedule = {{2, 3}, {4, 16}};
  EXPECT_THAT(GenerateBatch(fake.slots, requests, bad_k).status().message(), HasSubstr("k_schedule[1]: k must be"));
  BatchOptions unordered;
  unordered.k_schedule = {{4, 3}, {2, 1}};
  EXPECT_THAT(GenerateBatch(fake.slots, requests, unordered).status().message(),
              HasSubstr("k_schedule[1]: max_batch = 2"));

  std::vector<BatchRequest> adaptive = requests;
  adaptive[1].options.adaptive_k = true;
  BatchOptions schedule;
  schedule.k_schedule = {{8, 2}};
  EXPECT_THAT(GenerateBatch(fake.slots, adaptive, schedule).status().message(),
              HasSubstr("request 1 asks for adaptive k, which conflicts"));

  std::vector<BatchRequest> carried = requests;
  auto controller = std::make_shared<AdaptiveK>(3);
  for (BatchRequest& r : carried) {
    r.options.k = 3;
    r.options.adaptive_k = true;
    r.options.adaptive_controller = controller;
  }
  EXPECT_THAT(GenerateBatch(fake.slots, carried).status().message(),
              HasSubstr("requests 0 and 1 share one adaptive-k controller"));
  for (const auto& t : fake.targets) EXPECT_EQ(t->reset_count(), 0) << "nothing ran";
}

TEST(BatchTest, StatisticsReachTheJsonAndTheSummary) {
  FakeSlots fake(2);
  FakeBatchVerifier verifier;
  std::vector<BatchRequest> requests = {MixedRequest(1), MixedRequest(2), MixedRequest(3)};
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(fake.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const nlohmann::json j = result->stats.ToJson();
  EXPECT_EQ(j["requests"], 3);
  EXPECT_EQ(j["forwards"], result->stats.forwards);
  EXPECT_EQ(j["verify_rows"], result->stats.verify_rows);
  EXPECT_DOUBLE_EQ(j["rows_per_forward"].get<double>(),
                   static_cast<double>(result->stats.verify_rows) / result->stats.forwards);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
  ASSERT_EQ(j["cycle_log"].size(), static_cast<size_t>(result->stats.cycles));
  EXPECT_EQ(j["cycle_log"][0]["verify_rows"], result->stats.cycle_log[0].verify_rows);
  EXPECT_EQ(j["cycle_log"][0]["draft_lengths"].size(), result->stats.cycle_log[0].draft_lengths.size());
  EXPECT_THAT(result->stats.Summary(), HasSubstr("3 requests (0 failed) over 2 slots"));
  for (const BatchRequestResult& r : result->requests) EXPECT_GT(r.tokens_per_second(), 0.0);
}

}  // namespace
}  // namespace mtpspec
